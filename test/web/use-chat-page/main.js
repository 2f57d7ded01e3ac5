// A useChat page as an app would write it: the default transport (POST /api/chat, and with
// `resume: true` GET /api/chat/:id/stream), its initial messages from the history endpoint.
// Built with Vite by test/web/use-chat.browser.test.ts; plain createElement, no JSX step.
import { useChat } from '@ai-sdk/react';
import { createElement as h, useEffect, useState } from 'react';
import { createRoot } from 'react-dom/client';

const sessionId = new URLSearchParams(location.search).get('session');
window.__resumes = 0;
window.__data = 0;

function Part({ part }) {
  if (part.type === 'text') return h('div', { className: 'text' }, part.text);
  if (part.type === 'data-actorloop-final') return h('div', { className: 'final' }, part.data.content);
  if (part.type === 'data-actorloop-resumed') return h('div', { className: 'resumed' }, 'resumed after restart');
  if (part.type.startsWith('tool-')) return h('div', { className: `tool ${part.state}` }, `${part.type.slice(5)} ${part.state}`);
  return null;
}

function Chat({ initial }) {
  const { messages, setMessages, sendMessage, status, resumeStream } = useChat({
    id: sessionId,
    messages: initial,
    resume: true,
    onData: () => (window.__data += 1),
    // the server went away mid-stream (or is still down): reconnect — the resume replays the open
    // reply —, then take the history, as docs/web.md's example does (a reply that ended meanwhile
    // is a 204 to the resume; the history has it whole)
    onError: () =>
      setTimeout(async () => {
        window.__resumes += 1;
        await resumeStream();
        setMessages(await (await fetch(`/api/chat/${encodeURIComponent(sessionId)}/messages`)).json());
      }, 300),
  });
  const [text, setText] = useState('');
  useEffect(() => {
    window.__chat = { messages, status };
  });
  const submit = (e) => {
    e.preventDefault();
    if (!text.trim()) return;
    void sendMessage({ text });
    setText('');
  };
  return h(
    'main',
    null,
    h('p', { id: 'status' }, status),
    h(
      'ol',
      { id: 'messages' },
      messages.map((m) =>
        h(
          'li',
          { key: m.id, className: `msg ${m.role}`, 'data-id': m.id },
          m.parts.map((p, i) => h(Part, { key: i, part: p })),
        ),
      ),
    ),
    h(
      'form',
      { onSubmit: submit },
      h('textarea', { id: 'prompt', value: text, onChange: (e) => setText(e.target.value) }),
      h('button', { type: 'submit' }, 'Send'),
    ),
  );
}

const initial = await (await fetch(`/api/chat/${encodeURIComponent(sessionId)}/messages`)).json();
createRoot(document.getElementById('root')).render(h(Chat, { initial }));
