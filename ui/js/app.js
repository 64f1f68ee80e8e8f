// The dashboard shell: sign-in with an API key, the key's role (GET /v1/glassbox/whoami), the
// navigation that role may see, and the hash router that mounts one page at a time. A page is
// a module exporting mount(root, ctx) → unmount(); it never sees a page its role may not.
import { api, key, ApiError } from './api.js';
import { h } from './dom.js';
import * as overview from './pages/overview.js';
import * as monitor from './pages/monitor.js';
import * as playground from './pages/playground.js';
import * as variants from './pages/variants.js';
import * as audit from './pages/audit.js';

const PAGES = { overview, monitor, playground, variants, audit };
const $ = (id) => document.getElementById(id);
let who = null;
let unmount = null;

// A page is open to the key when its data-needs capability (if any) is true for it.
const allowed = (name) => {
  const link = document.querySelector(`#nav a[data-page="${name}"]`);
  return link != null && (!link.dataset.needs || who.can[link.dataset.needs] === true);
};

function route() {
  if (!who) return;
  let name = (location.hash.match(/^#\/([a-z]+)/) ?? [])[1] ?? 'overview';
  if (!PAGES[name] || !allowed(name)) name = 'overview';
  if (unmount) unmount();
  unmount = null;
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.dataset.page === name);
  const root = $('main');
  root.replaceChildren();
  root.dataset.page = name;
  document.title = `Glassbox · ${name[0].toUpperCase()}${name.slice(1)}`;
  unmount = PAGES[name].mount(root, { who }) ?? null;
}

function showLogin(message = '') {
  who = null;
  if (unmount) unmount();
  unmount = null;
  $('main').replaceChildren();
  $('nav').hidden = true;
  $('who').hidden = true;
  $('login').hidden = false;
  $('login-error').textContent = message;
  $('login-key').focus();
}

async function signIn() {
  try {
    who = await api('/v1/glassbox/whoami');
  } catch (e) {
    key.clear();
    return showLogin(e instanceof ApiError && e.status === 401 ? 'This server does not know that key.' : e.message);
  }
  $('login').hidden = true;
  $('nav').hidden = false;
  for (const a of document.querySelectorAll('#nav a')) a.hidden = !allowed(a.dataset.page);
  $('who-text').replaceChildren(h('span', {}, `${who.key_id} `), h('span.role', { dataset: { role: who.role } }, who.role),
    h('span.model', {}, ` · ${who.model}`));
  $('who').hidden = false;
  route();
}

$('login-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const k = $('login-key').value.trim();
  if (!k) return;
  key.set(k);
  $('login-key').value = '';
  signIn();
});
$('sign-out').addEventListener('click', () => {
  key.clear();
  showLogin();
});
window.addEventListener('hashchange', route);

// With no key in this tab, ask for one (no request is made without it).
if (key.get()) signIn();
else showLogin();
