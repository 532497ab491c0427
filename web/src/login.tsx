import { useState } from 'preact/hooks';

/** Asks for the server's API key (kept in sessionStorage for this tab by the caller). */
export function Login({ rejected, onKey }: { rejected: boolean; onKey: (key: string) => void }) {
  const [key, setKey] = useState('');
  return (
    <form
      class="login"
      onSubmit={(e) => {
        e.preventDefault();
        if (key.trim()) onKey(key.trim());
      }}
    >
      <h1>tandem</h1>
      <p>This server needs its API key (`tandem serve --api-key` or TANDEM_API_KEY).</p>
      {rejected && <p class="error">The key was refused; try again.</p>}
      <input
        type="password"
        name="key"
        autocomplete="current-password"
        placeholder="API key"
        value={key}
        onInput={(e) => setKey((e.target as HTMLInputElement).value)}
      />
      <button type="submit">open</button>
    </form>
  );
}
