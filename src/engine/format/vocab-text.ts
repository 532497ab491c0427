/**
 * The English text tandem's generated vocabularies are learned from. Written for tandem; it
 * only has to hold common words, punctuation and a few numbers and accents so the learned
 * pieces look like a real tokenizer's.
 */
export const VOCAB_TEXT = `The harbor town woke slowly on the first cold morning of the year. Fishing boats rocked against the wooden pier, and the gulls argued over a basket of bread that someone had left by the water. A baker opened her shop at six, as she had done every day for thirty-one years, and the smell of warm loaves drifted down the narrow streets toward the sea.

In the small school on the hill, a teacher wrote a question on the board: "How many machines does it take to think one thought?" The children laughed, because it sounded like a riddle. Then they began to count. One machine can read a page; two machines can share the work and read it twice as fast, if they talk to each other quickly enough. Ten machines need a plan, a map of who sends what to whom, and a way to notice when one of them stops answering.

Her students learned that a model is only a very large table of numbers. When you ask it a question, the words are turned into tokens, the tokens into vectors, and the vectors pass through layer after layer of multiplication and addition. Each layer looks back at the words that came before, decides which of them matter, and writes a little more meaning into the stream. At the end, the model guesses the next word, and then the next, one at a time, until it decides to stop.

After lunch the weather changed. Dark clouds came in from the west, the wind turned the flags around, and the rain fell so hard that the street became a river for an hour. Nobody minded very much. The café near the station filled with people drinking tea and coffee, reading newspapers, and talking about the storm of 1987, which everybody remembered differently.

By evening the sky was clear again. The lighthouse keeper climbed the one hundred and twelve steps to the lamp, cleaned the glass, and checked the clockwork that turned the light. He wrote in his book: wind from the north-west, sea calm, three ships passed, all well. Then he made a cup of soup, sat by the window, and watched the lights of the town come on — first the houses by the water, then the streets on the hill, and last of all the school, where the teacher was still working.

Some questions are simple and some are not. What is the fastest way to add a million numbers? Why does a long message take longer to send than a short one? What should happen when a computer in the middle of a ring goes quiet? Good engineers write the answers down, test them, measure them, and change their minds when the numbers say they were wrong.
`;
