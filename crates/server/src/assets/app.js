// The ragbox page: sign-in, ask (streamed answers with citation chips and a sources sidebar),
// chat sessions, documents (upload with progress, remove, re-ingest) and, for admins, the audit
// log, the sources' syncs and doctor's view. Built with the DOM only (text is never parsed as HTML).

import { ApiError, get, post, del, stream, tenantPath, upload } from '/assets/api.js';

const $ = (sel, root = document) => root.querySelector(sel);

// Creates an element: h('p', {class: 'x', onclick: f}, 'text', child...).
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const state = { me: null, tenant: null, view: 'ask', session: null };

function notice(message, kind = 'error') {
  const n = $('#notice');
  n.textContent = message || '';
  n.className = `notice ${kind}`;
  n.hidden = !message;
}

function fail(e) {
  if (e instanceof ApiError && e.status === 401) {
    showSignIn('Your sign-in has ended. Sign in again.');
    return;
  }
  notice(e.message || String(e));
}

// ---- text helpers -------------------------------------------------------------------------

const encoder = new TextEncoder();
const decoder = new TextDecoder();

// `words` in `text` whatever the whitespace between them (a passage wraps its lines; a quote
// does not): the match, or null.
function findWords(text, words) {
  const parts = words.split(/\s+/).filter(Boolean).map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
  return parts.length ? new RegExp(parts.join('\\s+')).exec(text) : null;
}

// Splits `text` at byte offsets (spans are UTF-8 byte ranges) into [before, inside, after].
function splitBytes(text, start, end) {
  const bytes = encoder.encode(text);
  const s = Math.max(0, Math.min(start, bytes.length));
  const e = Math.max(s, Math.min(end, bytes.length));
  return [decoder.decode(bytes.slice(0, s)), decoder.decode(bytes.slice(s, e)), decoder.decode(bytes.slice(e))];
}

const baseName = (path) => String(path).split(/[\\/]/).pop();
const ms = (v) => (v >= 1000 ? `${(v / 1000).toFixed(1)} s` : `${Math.round(v)} ms`);
const size = (n) => (n >= 1 << 20 ? `${(n / (1 << 20)).toFixed(1)} MB` : n >= 1024 ? `${Math.round(n / 1024)} KB` : `${n} B`);

function location_(s) {
  if (s.page) return `page ${s.page}`;
  if (s.lines) return s.lines.first === s.lines.last ? `line ${s.lines.first}` : `lines ${s.lines.first}–${s.lines.last}`;
  return '';
}

// ---- sign-in ------------------------------------------------------------------------------

function showSignIn(message) {
  state.me = null;
  for (const v of document.querySelectorAll('main > section')) v.hidden = true;
  $('#signin-view').hidden = false;
  $('#tabs').hidden = true;
  $('#who').hidden = true;
  notice('');
  $('#signin-error').textContent = message || '';
  get('/web/sso').then((sso) => {
    $('#sso-oidc').hidden = !sso.oidc;
    $('#ldap-form').hidden = !sso.ldap;
    $('#sso-or').hidden = !(sso.oidc || sso.ldap);
    (sso.ldap ? $('#ldap-user') : $('#key')).focus();
  }, () => $('#key').focus());
}

const SIGNIN_NOTES = {
  used: 'That sign-in link has already been used (each link works once). Sign in with a key, or restart ragbox serve for a new link.',
  refused: 'The sign-in was cancelled at your organisation\'s page. Try again.',
  failed: 'Your organisation\'s sign-in did not complete here. Try again; if it persists, ask an administrator.',
  'no-group': 'You signed in, but none of your groups is given access to ragbox. Ask an administrator.',
};

async function start() {
  const params = new URLSearchParams(window.location.search);
  const note = SIGNIN_NOTES[params.get('signin')] || '';
  const usedLink = params.get('signin') === 'used';
  if (params.has('signin')) history.replaceState(null, '', '/');
  try {
    state.me = await get('/web/session');
  } catch (e) {
    if (e.status !== 401) return showSignIn(e.message);
    return showSignIn(note);
  }
  enterApp();
  if (usedLink) notice(`That sign-in link has already been used; you are still signed in as ${state.me.name}.`, 'info');
}

function enterApp() {
  const me = state.me;
  $('#signin-view').hidden = true;
  $('#tabs').hidden = false;
  $('#who').hidden = false;
  $('[data-view=admin]').hidden = !me.admin;
  $('#who-name').textContent = me.groups && me.groups.length ? `${me.name} · ${me.role} · ${me.groups.join(', ')}` : `${me.name} · ${me.role}`;
  const select = $('#tenant');
  select.replaceChildren(...me.tenants.map((t) => h('option', { value: t }, t)));
  const saved = localStorage.getItem('ragbox.tenant');
  state.tenant = me.tenants.includes(saved) ? saved : me.tenants[0] || null;
  if (state.tenant) select.value = state.tenant;
  select.disabled = me.tenants.length < 2;
  exportLink();
  if (!state.tenant) notice('This key reaches no tenant yet. An admin can ingest documents, or a writer key can upload some.', 'info');
  show(state.view);
}

$('#signin-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  $('#signin-error').textContent = '';
  try {
    await post('/web/session', { key: $('#key').value });
    $('#key').value = '';
    start();
  } catch (e) {
    $('#signin-error').textContent = e.status === 401 ? 'That key is not valid (unknown or revoked). Check it and try again.' : e.message;
  }
});

$('#ldap-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  $('#signin-error').textContent = '';
  try {
    await post('/web/session', { user: $('#ldap-user').value, password: $('#ldap-password').value });
    $('#ldap-password').value = '';
    start();
  } catch (e) {
    $('#ldap-password').value = '';
    $('#signin-error').textContent = e.message;
  }
});

$('#sign-out').addEventListener('click', async () => {
  try { await del('/web/session'); } catch { /* signed out either way */ }
  showSignIn('You are signed out.');
});

// What the appliance keeps of the signed-in person's conversations in this tenant, as a download.
function exportLink() {
  const link = $('#export-mine');
  link.hidden = !state.tenant;
  if (state.tenant) link.href = tenantPath(state.tenant, '/export');
}

$('#tenant').addEventListener('change', (ev) => {
  state.tenant = ev.target.value;
  localStorage.setItem('ragbox.tenant', state.tenant);
  exportLink();
  state.session = null;
  $('#answer').replaceChildren();
  $('#sources').replaceChildren();
  show(state.view);
});

// ---- views --------------------------------------------------------------------------------

function show(view) {
  if (view === 'admin' && !state.me.admin) view = 'ask';
  state.view = view;
  for (const b of document.querySelectorAll('#tabs button')) {
    if (b.dataset.view === view) b.setAttribute('aria-current', 'page');
    else b.removeAttribute('aria-current');
  }
  for (const v of ['ask', 'chat', 'documents', 'admin']) $(`#${v}-view`).hidden = v !== view;
  notice('');
  if (view === 'chat') loadSessions();
  if (view === 'documents') loadDocuments();
  if (view === 'admin') { loadSources(); loadAudit(); loadDoctor(); }
}

for (const b of document.querySelectorAll('#tabs button')) b.addEventListener('click', () => show(b.dataset.view));

// ---- answers ------------------------------------------------------------------------------

// One answer being shown: `text` is where it streams, `sources` the sidebar it cites into.
class AnswerView {
  constructor(container, sources) {
    this.container = container;
    this.sources = sources;
    this.status = h('p', { class: 'status' }, 'Searching the documents…');
    this.live = h('p', { class: 'streaming' });
    this.container.replaceChildren(this.status, this.live);
    this.sources.replaceChildren();
    this.text = '';
  }

  followUp(f) {
    if (f.question && f.rewritten_by) {
      this.container.prepend(h('p', { class: 'rewritten' }, h('span', { class: 'muted' }, 'Retrieval saw: '), h('q', {}, f.question)));
    }
  }

  opened() {
    if (!this.text) this.status.textContent = 'Reading the passages…';
  }

  token(t) {
    if (!this.text) this.status.textContent = 'Writing the answer…';
    this.text += t;
    this.live.textContent = this.text;
  }

  error(e, retry) {
    this.status.remove();
    const box = h('div', { class: 'error-box', role: 'alert' }, h('p', {}, e.message));
    if (retry) box.append(h('button', { type: 'button', class: 'retry', onclick: retry }, 'Retry'));
    this.container.append(box);
  }

  final(a) {
    this.status.remove();
    this.live.remove();
    const body = h('div', { class: 'answer' });
    if (a.refused) {
      const doesNotSay = a.outcome === 'does_not_say';
      const heading = { no_answer_written: 'No answer written', unsupported: 'No supported answer', documents_do_not_say: 'The documents do not say' }[a.refusal] || 'No good source';
      body.append(
        h('div', { class: doesNotSay ? 'refusal does-not-say' : 'refusal', role: 'status', dataset: { outcome: a.outcome || '' } },
          h('h2', {}, heading),
          h('p', {}, ...(doesNotSay ? this.withChips(a.answer || '', a.closest) : [a.answer || 'The documents do not answer this question.'])),
          doesNotSay ? h('p', { class: 'muted' }, 'The passages below are about the subject of your question, but none of them gives what you asked.') : null),
      );
      if (a.refusal === 'unsupported' && a.sentences && a.sentences.length) {
        const list = h('ul', { class: 'flag-reasons muted' });
        a.sentences.forEach((s) => list.append(h('li', {}, `Withheld: “${s.text}”${s.reason ? ` (${s.reason})` : ''}.`)));
        body.append(list);
      }
      this.renderSources(a.closest || [], true);
    } else {
      const text = h('p', { class: 'answer-text' });
      const sentences = a.sentences && a.sentences.length ? a.sentences : [{ text: a.answer, citations: [], supported: true }];
      sentences.forEach((s, i) => {
        if (i) text.append(' ');
        const cls = s.supported ? 'sentence' : 'sentence unsupported';
        const reason = s.supported ? null
          : s.reason ? `Not supported: ${s.reason}.`
          : !s.citations.length ? 'This sentence cites no passage.'
          : `No cited passage supports this sentence (support ${s.support == null ? '—' : s.support.toFixed(2)} by ${a.support_method}).`;
        text.append(h('span', { class: cls, title: reason, tabindex: reason ? 0 : null, 'aria-label': reason ? `${s.text} (warning: ${reason})` : null }, this.withChips(s.text, a.sources)));
      });
      body.append(text);
      if (a.decision) {
        const verdict = a.verdict ? ` “${a.verdict}” is the model's reading of it.` : '';
        body.append(h('p', { class: 'quote-note muted', dataset: { outcome: 'answered' } }, `The evidence, quoted as the documents write it.${verdict}`));
      }
      const flagged = sentences.filter((s) => !s.supported && s.reason);
      if (flagged.length) {
        const list = h('ul', { class: 'flag-reasons muted' });
        flagged.forEach((s) => list.append(h('li', {}, `Amber: ${s.reason}.`)));
        body.append(list);
      }
      if (a.invalid_citations && a.invalid_citations.length) {
        body.append(h('p', { class: 'muted' }, `Removed citations that named no passage: ${a.invalid_citations.join(', ')}`));
      }
      if (a.cut_mid_sentence) body.append(h('p', { class: 'muted' }, 'The answer reached the length limit mid-sentence; that unfinished sentence is left out.'));
      else if (a.hit_token_cap) body.append(h('p', { class: 'muted' }, 'The answer reached the length limit and may be cut short.'));
      const quotedText = a.decision && a.decision.evidence.length ? a.decision.evidence[0].text : null;
      this.renderSources(a.sources || [], false, quotedText);
    }
    body.append(this.footer(a));
    if (a.answer_id) body.append(this.feedback(a.answer_id));
    this.container.append(body);
  }

  withChips(text, sources) {
    const parts = [];
    let last = 0;
    for (const m of text.matchAll(/\[(\d+)\]/g)) {
      parts.push(text.slice(last, m.index));
      const n = Number(m[1]);
      const src = (sources || []).find((s) => s.id === n);
      const chip = h('button', {
        type: 'button', class: 'chip', dataset: { source: String(n) },
        'aria-label': `Source ${n}${src ? `: ${src.title || baseName(src.document)}` : ''}`,
        onmouseenter: () => this.highlight(n, true), onmouseleave: () => this.highlight(n, false),
        onfocus: () => this.highlight(n, true), onblur: () => this.highlight(n, false),
        onclick: () => src && openDocument(src),
      }, String(n));
      parts.push(chip);
      last = m.index + m[0].length;
    }
    parts.push(text.slice(last));
    return parts;
  }

  highlight(n, on) {
    const card = this.sources.querySelector(`.source-card[data-source="${n}"]`);
    if (!card) return;
    card.classList.toggle('active', on);
    if (on) card.scrollIntoView({ block: 'nearest', behavior: 'smooth' });
  }

  renderSources(list, notSources, quote) {
    const heading = h('h2', { class: 'small' }, notSources ? 'Closest material' : 'Sources');
    const cards = list.map((s) => {
      // A quoted sentence is marked where it stands in its passage; else the matched words are
      // marked when they are part of a larger passage (a merged section).
      const text = s.text || '';
      const found = quote ? findWords(text, quote) : null;
      const m = s.matched_span;
      const part = m && (m.start > s.span.start || m.end < s.span.end);
      const [before, cited, after] = found ? [text.slice(0, found.index), found[0], text.slice(found.index + found[0].length)]
        : part ? splitBytes(text, m.start - s.span.start, m.end - s.span.start) : [text, '', ''];
      return h('article', { class: notSources ? 'source-card not-source' : 'source-card', dataset: { source: String(s.id), doc: String(s.doc) } },
        h('header', {},
          notSources ? h('span', { class: 'badge warn' }, 'not a source') : h('span', { class: 'badge' }, String(s.id)),
          h('span', { class: 'source-title' }, s.title || baseName(s.document))),
        s.section_path && s.section_path.length ? h('p', { class: 'section-path' }, s.section_path.join(' › ')) : null,
        h('p', { class: 'meta' }, [baseName(s.document), location_(s), `score ${Number(s.score).toFixed(2)}`].filter(Boolean).join(' · ')),
        h('blockquote', { class: 'excerpt' }, before, cited ? h('mark', {}, cited) : null, after),
        h('button', { type: 'button', class: 'open-doc', onclick: () => openDocument(s) }, 'Open at this passage'),
      );
    });
    if (!list.length) cards.push(h('p', { class: 'muted' }, 'Nothing close enough was found.'));
    this.sources.replaceChildren(heading, ...cards);
    // A quoted sentence is often below the excerpt's fold: scroll it into the excerpt's view.
    if (quote) {
      for (const mark of this.sources.querySelectorAll('.excerpt mark')) {
        const box = mark.closest('.excerpt');
        box.scrollTop += mark.getBoundingClientRect().top - box.getBoundingClientRect().top - 8;
      }
    }
  }

  footer(a) {
    const t = a.timings || {};
    const parts = [`retrieval ${ms(t.retrieve_ms || 0)}`];
    if (t.rewrite_ms) parts.push(`rewrite ${ms(t.rewrite_ms)}`);
    if (t.focus_ms) parts.push(`${a.decision ? 'evidence and decision' : 'focus'} ${ms(t.focus_ms)}`);
    if (t.first_token_ms) parts.push(`first token ${ms(t.first_token_ms)}`);
    parts.push(`total ${ms(t.total_ms || 0)}`);
    if (t.completion_tokens) parts.push(`${t.completion_tokens} tokens at ${Number(t.tokens_per_second || 0).toFixed(1)}/s`);
    if (a.model) parts.push(a.written_by && a.written_by !== 'local' ? `${a.model} (${a.written_by})` : a.model);
    return h('footer', { class: 'timings' }, parts.join(' · '));
  }

  feedback(answerId) {
    const status = h('span', { class: 'feedback-status', role: 'status' });
    const comment = h('input', { type: 'text', class: 'feedback-comment', 'aria-label': 'Comment (optional)', placeholder: 'Comment (optional)', maxlength: 2000 });
    const send = async (rating, button) => {
      try {
        await post(tenantPath(state.tenant, '/feedback'), { answer_id: answerId, rating, comment: comment.value.trim() || undefined });
        for (const b of box.querySelectorAll('button')) b.setAttribute('aria-pressed', String(b === button));
        status.textContent = 'Thanks: your rating is recorded.';
      } catch (e) {
        status.textContent = e.message;
      }
    };
    const up = h('button', { type: 'button', class: 'feedback-up', 'aria-pressed': 'false', onclick: () => send('up', up) }, '▲ Helpful');
    const down = h('button', { type: 'button', class: 'feedback-down', 'aria-pressed': 'false', onclick: () => send('down', down) }, '▼ Not helpful');
    const box = h('div', { class: 'feedback' }, up, down, comment, status);
    return box;
  }
}

let asking = null;

async function ask(question) {
  if (!state.tenant) return notice('Pick a tenant first.');
  if (asking) asking.abort();
  asking = new AbortController();
  const view = new AnswerView($('#answer'), $('#sources'));
  $('#ask-button').disabled = true;
  try {
    await stream(tenantPath(state.tenant, '/ask'), { question }, (name, data) => {
      if (name === 'open') view.opened();
      else if (name === 'token') view.token(data.text);
      else if (name === 'answer') view.final(data);
      else if (name === 'error') view.error(new ApiError(0, data.code || 'error', (data.error && data.error.message) || data.message || 'The answer failed.'), () => ask(question));
    }, asking.signal);
  } catch (e) {
    if (e.name === 'AbortError') return;
    if (e.status === 401) return fail(e);
    view.error(e, () => ask(question));
  } finally {
    $('#ask-button').disabled = false;
  }
}

$('#ask-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const q = $('#question').value.trim();
  if (q) ask(q);
});

for (const id of ['#question', '#chat-question']) {
  $(id).addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey) {
      ev.preventDefault();
      ev.target.form.requestSubmit();
    }
  });
}

// ---- the document viewer ------------------------------------------------------------------

async function openDocument(s) {
  const dialog = $('#doc-dialog');
  $('#doc-title').textContent = s.title || baseName(s.document);
  $('#doc-path').textContent = [s.document, location_(s)].filter(Boolean).join(' · ');
  $('#doc-warning').hidden = true;
  $('#doc-text').replaceChildren('Loading…');
  if (!dialog.open) dialog.showModal();
  try {
    const d = await get(tenantPath(state.tenant, `/documents/${s.doc}/text`));
    const cited = s.matched_span || s.span;
    const [before, passage, after] = splitBytes(d.text, s.span.start, s.span.end);
    const inner = splitBytes(passage, cited.start - s.span.start, cited.end - s.span.start);
    const mark = h('mark', { class: 'cited', id: 'cited-span' }, inner[1]);
    $('#doc-text').replaceChildren(before, h('span', { class: 'passage' }, inner[0], mark, inner[2]), after);
    if (d.changed) {
      $('#doc-warning').textContent = 'This file changed after it was ingested: the marked passage may not match. Re-ingest it from Documents.';
      $('#doc-warning').hidden = false;
    }
    mark.scrollIntoView({ block: 'center' });
  } catch (e) {
    $('#doc-text').replaceChildren(h('span', { class: 'error' }, e.message));
  }
}

$('#doc-close').addEventListener('click', () => $('#doc-dialog').close());

// ---- chat ---------------------------------------------------------------------------------

async function loadSessions() {
  if (!state.tenant) return;
  try {
    const { sessions } = await get(tenantPath(state.tenant, '/chat/sessions'));
    const list = $('#sessions');
    list.replaceChildren(...sessions.map((s) => h('li', {},
      h('button', { type: 'button', class: 'session', 'aria-current': s.session === state.session ? 'true' : null, onclick: () => openSession(s.session) },
        `Chat ${s.session}`, h('span', { class: 'muted' }, ` · ${s.turns} turn${s.turns === 1 ? '' : 's'} · ${new Date(s.created_ms).toLocaleString()}`)))));
    if (!sessions.length) list.append(h('li', { class: 'muted' }, 'No chats yet.'));
  } catch (e) {
    fail(e);
  }
}

async function openSession(id) {
  state.session = id;
  $('#turns').replaceChildren();
  try {
    const { turns } = await get(tenantPath(state.tenant, `/chat/sessions/${id}`));
    for (const t of turns) {
      const turn = h('div', { class: 'turn' }, h('p', { class: 'you' }, t.question));
      if (t.standalone && t.standalone !== t.question) turn.append(h('p', { class: 'rewritten' }, h('span', { class: 'muted' }, 'Retrieval saw: '), h('q', {}, t.standalone)));
      turn.append(h('p', { class: 'answer-text past' }, t.answer));
      $('#turns').append(turn);
    }
    loadSessions();
  } catch (e) {
    fail(e);
  }
}

$('#new-chat').addEventListener('click', () => {
  state.session = null;
  $('#turns').replaceChildren(h('p', { class: 'muted' }, 'A new chat: ask a question, then follow up.'));
  $('#chat-question').focus();
  loadSessions();
});

$('#chat-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const question = $('#chat-question').value.trim();
  if (!question || !state.tenant) return;
  $('#chat-send').disabled = true;
  try {
    if (!state.session) state.session = (await post(tenantPath(state.tenant, '/chat/sessions'))).session;
    $('#chat-question').value = '';
    const answer = h('div', { class: 'turn-answer' });
    const sources = h('div', { class: 'sources inline' });
    $('#turns').append(h('div', { class: 'turn' }, h('p', { class: 'you' }, question), answer, sources));
    const view = new AnswerView(answer, sources);
    await stream(tenantPath(state.tenant, `/chat/sessions/${state.session}/messages`), { question }, (name, data) => {
      if (name === 'open') view.opened();
      else if (name === 'follow_up') view.followUp(data);
      else if (name === 'token') view.token(data.text);
      else if (name === 'answer') view.final(data);
      else if (name === 'error') view.error(new ApiError(0, 'error', (data.error && data.error.message) || 'The answer failed.'));
    }).catch((e) => (e.status === 401 ? fail(e) : view.error(e)));
    loadSessions();
  } catch (e) {
    fail(e);
  } finally {
    $('#chat-send').disabled = false;
  }
});

// ---- documents ----------------------------------------------------------------------------

async function loadDocuments() {
  const canWrite = state.me.can_write;
  $('#upload-zone').hidden = !canWrite;
  $('#read-only-note').hidden = canWrite;
  const body = $('#documents-table tbody');
  if (!state.tenant) return body.replaceChildren();
  let docs = [];
  try {
    docs = (await get(tenantPath(state.tenant, '/documents'))).documents;
  } catch (e) {
    // A writer's tenant that has no upload yet does not exist: an empty list, not an error.
    if (e.status !== 404) return fail(e);
  }
  body.replaceChildren(...docs.map((d) => {
    const status = d.status === 'indexed' ? h('span', { class: 'ok' }, 'ingested')
      : h('span', { class: 'warn', title: d.skip_reason || '' }, `skipped: ${d.skip_reason || 'no reason given'}`);
    const actions = h('td', { class: 'actions' });
    if (canWrite) {
      actions.append(
        h('button', { type: 'button', onclick: () => runJob(post(tenantPath(state.tenant, `/documents/${d.id}/reingest`)), baseName(d.path)) }, 'Re-ingest'),
        removeButton(d),
      );
    }
    return h('tr', { dataset: { doc: String(d.id) } },
      h('th', { scope: 'row', title: d.path }, d.title && d.title !== baseName(d.path) ? [d.title, h('br'), h('span', { class: 'muted' }, baseName(d.path))] : baseName(d.path)),
      h('td', { class: 'doc-status' }, status), h('td', {}, d.parser || '—'), h('td', {}, String(d.chunks)), h('td', {}, size(d.size)), actions);
  }));
  if (!docs.length) body.append(h('tr', {}, h('td', { colspan: 6, class: 'muted' }, canWrite ? 'No documents yet: upload some above.' : 'No documents yet.')));
}

// Remove asks once more on the same button (no modal prompt).
function removeButton(d) {
  const b = h('button', { type: 'button', class: 'danger' }, 'Remove');
  let armed = false;
  b.addEventListener('click', async () => {
    if (!armed) {
      armed = true;
      b.textContent = `Remove ${baseName(d.path)}?`;
      setTimeout(() => { armed = false; b.textContent = 'Remove'; }, 5000);
      return;
    }
    try {
      await del(tenantPath(state.tenant, `/documents/${d.id}`));
      notice(`Removed ${baseName(d.path)}.`, 'info');
      loadDocuments();
    } catch (e) {
      fail(e);
    }
  });
  return b;
}

// Follows an ingest job to its end in an upload row.
async function follow(job, row) {
  const bar = $('progress', row);
  const label = $('.upload-state', row);
  for (;;) {
    if (job.state === 'done') {
      const r = job.report || {};
      const skipped = (r.skipped && r.skipped.length) || 0;
      bar.value = 1;
      label.textContent = skipped ? `skipped: ${(r.skipped[0] && (r.skipped[0].reason || r.skipped[0].detail)) || 'see Documents'}` : 'ingested';
      row.classList.add(skipped ? 'skipped' : 'done');
      loadDocuments();
      return;
    }
    if (job.state === 'failed') {
      label.textContent = `failed: ${job.error}`;
      row.classList.add('failed');
      return;
    }
    label.textContent = job.state === 'queued' ? 'waiting to ingest…' : `ingesting… ${job.chunks} chunks`;
    bar.removeAttribute('value'); // indeterminate while ingesting
    await new Promise((r) => setTimeout(r, 500));
    try {
      job = (await get(tenantPath(state.tenant, `/jobs/${job.id}`))).job;
    } catch (e) {
      label.textContent = e.message;
      return;
    }
  }
}

function uploadRow(name) {
  const row = h('li', { class: 'upload-row' },
    h('span', { class: 'upload-name' }, name),
    h('progress', { max: 1, value: 0, 'aria-label': `Progress of ${name}` }),
    h('span', { class: 'upload-state', role: 'status' }, 'uploading…'));
  $('#uploads').prepend(row);
  return row;
}

async function runJob(request, name) {
  const row = uploadRow(name);
  try {
    follow((await request).job, row);
  } catch (e) {
    $('.upload-state', row).textContent = e.message;
    row.classList.add('failed');
  }
}

async function uploadFiles(files) {
  for (const file of files) {
    const row = uploadRow(file.name);
    const bar = $('progress', row);
    try {
      const job = await upload(state.tenant, file, (p) => { bar.value = p; $('.upload-state', row).textContent = `uploading… ${Math.round(p * 100)}%`; });
      follow(job, row);
    } catch (e) {
      if (e.status === 401) return fail(e);
      $('.upload-state', row).textContent = e.message;
      row.classList.add('failed');
    }
  }
}

$('#file-input').addEventListener('change', (ev) => {
  uploadFiles([...ev.target.files]);
  ev.target.value = '';
});
const zone = $('#upload-zone');
zone.addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); $('#file-input').click(); }
});
zone.addEventListener('dragover', (ev) => { ev.preventDefault(); zone.classList.add('over'); });
zone.addEventListener('dragleave', () => zone.classList.remove('over'));
zone.addEventListener('drop', (ev) => {
  ev.preventDefault();
  zone.classList.remove('over');
  uploadFiles([...ev.dataTransfer.files]);
});

// ---- admin --------------------------------------------------------------------------------

let sourcesTimer = null;

function ago(ms) {
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 120) return `${s} s ago`;
  if (s < 7200) return `${Math.round(s / 60)} min ago`;
  return `${Math.round(s / 3600)} h ago`;
}

function lastSync(last) {
  if (!last) return h('span', { class: 'muted' }, 'never');
  if (last.ok) {
    const s = last.sync;
    return h('span', { class: 'ok' }, `ok ${ago(last.finished_ms)}: ${s.listed} listed, ${s.fetched} fetched, ${last.added} added, ${last.updated} updated, ${last.removed} removed`
      + (s.problems.length ? `; ${s.problems.length} not fetched` : ''));
  }
  const since = last.last_success_ms ? `; last ok ${ago(last.last_success_ms)}` : '';
  return h('span', { class: 'error' }, `FAILED ${ago(last.finished_ms)} (${last.failures_in_a_row} in a row${since}): ${last.error}`);
}

async function loadSources() {
  clearTimeout(sourcesTimer);
  try {
    const { sources } = await get('/v1/admin/sources');
    $('#sources-empty').hidden = sources.length > 0;
    $('#sources-table').hidden = sources.length === 0;
    $('#sources-table tbody').replaceChildren(...sources.map((s) => {
      const r = s.running;
      const now = r ? `${r.phase}${r.total ? ` ${r.done}/${r.total}` : '…'}` : 'idle';
      const button = h('button', { type: 'button', class: 'quiet', onclick: async () => {
        button.disabled = true;
        try { await post(`/v1/admin/sources/${encodeURIComponent(s.config.name)}/sync`); } catch (e) { fail(e); }
        setTimeout(loadSources, 500);
      } }, 'Sync now');
      return h('tr', { class: s.last && !s.last.ok ? 'flag' : '', 'data-source': s.config.name },
        h('td', {}, h('strong', {}, s.config.name), ` (${s.config.kind})`), h('td', {}, s.location), h('td', {}, s.config.tenant),
        h('td', {}, s.config.interval), h('td', { class: 'source-now' }, now), h('td', { class: 'source-last' }, lastSync(s.last)), h('td', {}, button));
    }));
    if (sources.some((s) => s.running) && !$('#admin-view').hidden) sourcesTimer = setTimeout(loadSources, 1500);
  } catch (e) {
    fail(e);
  }
}

async function loadAudit() {
  const q = new URLSearchParams();
  const tenant = $('#audit-tenant').value.trim();
  if (tenant) q.set('tenant', tenant);
  const since = $('#audit-since').value;
  if (since) q.set('since_ms', String(new Date(since).getTime()));
  q.set('limit', $('#audit-limit').value || '200');
  try {
    const { events } = await get(`/v1/admin/audit?${q}`);
    const action = $('#audit-action').value.trim();
    const rows = events.filter((e) => !action || e.action === action).reverse();
    $('#audit-table tbody').replaceChildren(...rows.map((e) => h('tr', { class: e.outcome === 'ok' ? '' : 'flag' },
      h('td', {}, String(e.id)), h('td', {}, new Date(e.time_ms).toLocaleString()), h('td', {}, e.key_name || '—'),
      h('td', {}, e.tenant || '—'), h('td', {}, e.action), h('td', { class: 'question' }, e.question || ''),
      h('td', {}, String((e.chunk_ids || []).length)), h('td', {}, e.outcome))));
    if (!rows.length) $('#audit-table tbody').append(h('tr', {}, h('td', { colspan: 8, class: 'muted' }, 'No rows match.')));
  } catch (e) {
    fail(e);
  }
}

$('#audit-form').addEventListener('submit', (ev) => { ev.preventDefault(); loadAudit(); });
$('#audit-verify').addEventListener('click', async () => {
  const out = $('#verify-result');
  out.textContent = 'Verifying…';
  try {
    const { intact, report } = await get('/v1/admin/audit/verify');
    out.className = intact ? 'ok' : 'error';
    out.textContent = intact
      ? `The chain is intact: ${report.rows} rows, head ${String(report.head || '').slice(0, 16)}…`
      : `The chain is BROKEN at row ${report.broken.id}: ${report.broken.reason}`;
  } catch (e) {
    out.textContent = e.message;
  }
});

async function loadDoctor() {
  const box = $('#doctor');
  try {
    const d = await get('/v1/admin/doctor');
    const dl = (pairs) => h('dl', { class: 'facts' }, pairs.flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
    box.replaceChildren(
      dl([
        ['version', `ragbox ${d.version} (candle ${d.candle})`], ['features', d.features.join(', ')], ['device', d.device],
        ['local LLM', d.llm_kernels], ['embedder', d.embed_model], ['reranker', `${d.rerank_model}: ${d.rerank_status}`],
        ['data folder', d.data_dir], ['models folder', d.models_dir],
      ]),
      h('h3', {}, 'Models'),
      h('ul', { class: 'plain' }, d.models.map((m) => h('li', {}, `${m.name} (${m.role}): `,
        h('span', { class: m.ready ? 'ok' : 'warn' }, m.ready ? 'present, sha256 verified' : `not ready${m.fix ? `: ${m.fix}` : ''}`)))),
      h('h3', {}, 'Tenants'),
      h('ul', { class: 'plain' }, d.tenants.map((t) => {
        const c = t.consistency;
        const text = c ? `generation ${c.generation}, ${c.catalog_children} passages; vector index ${c.vector_generation ?? 'missing'}, lexical ${c.lexical_generation ?? 'missing'}: ${c.consistent ? 'consistent' : 'behind or damaged (rebuilt at next open)'}` : `cannot check: ${t.error}`;
        return h('li', { class: c && c.consistent ? '' : 'warn' }, h('strong', {}, t.tenant.name), ` (${t.tenant.model}): ${text}`);
      })),
    );
  } catch (e) {
    box.replaceChildren(h('p', { class: 'error' }, e.message));
  }
}

start();
