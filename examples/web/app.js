// The chat page: plain JavaScript, no build step. /client.js is actorloop/client for the browser.
import { initialView, reduceView, sessionStream } from '/client.js';

const params = new URLSearchParams(location.search);
let sessionId = params.get('session');
if (!sessionId) {
  sessionId = `web-${new Date().toISOString().slice(0, 19).replace(/[-:T]/g, '')}-${crypto.randomUUID().slice(0, 4)}`;
  history.replaceState(null, '', `?session=${encodeURIComponent(sessionId)}`);
}
const api = `/sessions/${encodeURIComponent(sessionId)}`;
const $ = (id) => document.getElementById(id);
$('sid').textContent = sessionId;
// the demo's prompt fills the box of a session that has none yet; a session whose log already
// holds a user message (a reload, a second tab) empties it, unless someone has typed in it since
let offered = params.get('prompt') ?? (await (await fetch('/demo-prompt')).text());
$('prompt').value = offered;
$('prompt').addEventListener('input', () => (offered = undefined), { once: true });

let view = initialView(sessionId);

// the session list (GET /sessions: the sessions this page may read, newest first) switches sessions
async function listSessions() {
  const res = await fetch('/sessions?limit=50');
  if (!res.ok) return;
  const ids = (await res.json()).sessions.map((s) => s.sessionId);
  if (!ids.includes(sessionId)) ids.unshift(sessionId);
  const option = (value, text) => Object.assign(document.createElement('option'), { value, textContent: text });
  $('sessions').replaceChildren(...ids.map((id) => option(id, id)), option('', '+ new session'));
  $('sessions').value = sessionId;
}
$('sessions').addEventListener('change', (e) => {
  const id = e.target.value;
  location.search = id ? `?session=${encodeURIComponent(id)}` : '';
});
$('sessions').addEventListener('focus', () => void listSessions());
void listSessions();

async function post(action, body) {
  const res = await fetch(`${api}/${action}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const receipt = await res.json();
  if (!res.ok) console.warn(action, res.status, receipt);
  return receipt;
}

$('send').addEventListener('submit', (e) => {
  e.preventDefault();
  const message = $('prompt').value.trim();
  if (!message) return;
  $('prompt').value = '';
  offered = undefined;
  void post('messages', { inputId: crypto.randomUUID(), message });
});

function el(tag, cls, text) {
  const n = document.createElement(tag);
  if (cls) n.className = cls;
  if (text !== undefined) n.textContent = text;
  return n;
}

function decide(pending, decision) {
  const decisions = {};
  for (const c of pending.calls) decisions[c.callId] = decision;
  void post('respond', { entryId: `respond-${pending.questionId}`, questionId: pending.questionId, answer: { decisions } });
}

function renderItem(item) {
  switch (item.kind) {
    case 'user':
      return el('div', 'item user', item.text);
    case 'assistant':
      return el('div', 'item assistant', item.text);
    case 'final':
      return el('div', 'item final', item.text);
    case 'resumed':
      return el('div', 'marker resumed', '↻ resumed after restart');
    // a suspended run has not ended: it waits for the approval or answer shown above it (said while it does)
    case 'run':
      if (item.status !== 'suspended') return el('div', 'run', `run ended: ${item.status}`);
      if (!view.pending || view.items.findLast((i) => i.kind === 'run') !== item) return undefined;
      return el('div', 'run waiting', view.pending.kind === 'approval' ? 'waiting for approval' : 'waiting for an answer');
    case 'tool': {
      const outcome = item.outcome;
      const failed = outcome && (outcome.kind !== 'completed' || outcome.isError);
      const n = el('div', `item tool${outcome ? (failed ? ' failed' : ' done') : ''}`);
      n.dataset.callId = item.callId;
      n.append(el('span', 'name', `${item.name} `), el('span', 'args', JSON.stringify(item.arguments)));
      if (!outcome && item.progress)
        n.append(el('div', 'progress', `⋯ ${item.progress.phase ?? ''} ${item.progress.progress ?? JSON.stringify(item.progress)}`));
      if (outcome)
        n.append(
          el(
            'div',
            'out',
            outcome.kind === 'completed'
              ? outcome.content.slice(0, 300)
              : `${outcome.kind}: ${outcome.reason ?? outcome.partialContent ?? outcome.content ?? ''}`,
          ),
        );
      if (item.child) n.append(renderChild(item.child));
      return n;
    }
    case 'approval': {
      const n = el('div', 'item approval');
      const calls = item.pendingRequest.calls.map((c) => `${c.name} ${JSON.stringify(c.arguments)}`).join(', ');
      n.append(el('div', '', `approval needed: ${calls}`));
      if (item.decisions)
        n.append(el('div', 'decided', `decided: ${Object.values(item.decisions.decisions ?? item.decisions).join(', ')}`));
      else if (view.pending?.questionId === item.pendingRequest.questionId) {
        const yes = el('button', 'approve', 'Approve');
        const no = el('button', 'deny', 'Deny');
        yes.onclick = () => ((yes.disabled = no.disabled = true), decide(item.pendingRequest, 'approve'));
        no.onclick = () => ((yes.disabled = no.disabled = true), decide(item.pendingRequest, 'deny'));
        n.append(yes, no);
      }
      return n;
    }
  }
  return el('div', 'item', JSON.stringify(item));
}

/** An agent call's child session, nested in its call: its id and run status, its items, its live text. */
function renderChild(child) {
  const box = el('div', 'child');
  box.dataset.sessionId = child.sessionId;
  box.append(el('div', 'child-head', `↳ ${child.sessionId}${child.runStatus ? ` · ${child.runStatus}` : ''}`));
  for (const i of child.items) {
    const n = i.kind === 'run' ? undefined : renderItem(i); // its status is in the head
    if (n) box.append(n);
  }
  if (child.streaming) box.append(el('div', 'item assistant streaming', child.streaming.text));
  if (child.error) box.append(el('div', 'run', `child log unreadable: ${child.error.message}`));
  return box;
}

let rendered = '';
function render() {
  const key = JSON.stringify([view.items, view.streaming, view.pending]);
  $('conn').textContent = view.reconnects > 0 && view.connection === 'open' ? `open (reconnected ×${view.reconnects})` : view.connection;
  $('conn').className = view.connection;
  if (key === rendered) return;
  rendered = key;
  const main = $('items');
  const nodes = view.items.map(renderItem).filter((n) => n !== undefined);
  if (view.streaming) nodes.push(el('div', 'item assistant streaming', view.streaming.text));
  main.replaceChildren(...nodes);
  main.scrollTop = main.scrollHeight;
}

try {
  for await (const item of sessionStream({ url: `${api}/events` })) {
    if (item.kind === 'committed' && item.record.type === 'user/message' && offered !== undefined && $('prompt').value === offered) {
      $('prompt').value = '';
      offered = undefined;
    }
    if (item.kind === 'committed') {
      // every committed frame as it arrives (not deduplicated): the log as this page received it
      const li = el('li');
      li.dataset.seq = String(item.logSeq);
      li.append(el('b', '', String(item.logSeq)), document.createTextNode(item.record.type));
      $('log').append(li);
    }
    view = reduceView(view, item);
    if (view.streaming?.text) window.__sawLiveText = true;
    window.__view = view;
    render();
  }
} catch (e) {
  // a refusal retrying cannot change (a bad session id, not authorized): the page says so and stops
  $('conn').textContent = `refused: ${e.message}`;
  $('conn').className = 'closed';
}
