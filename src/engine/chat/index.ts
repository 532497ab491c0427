export {
  ChatTemplate,
  type ChatMessage,
  type ChatFallback,
  type ChatRenderOptions,
  type ChatTemplateOptions,
} from './chat-template.js';
