// The container image (deploy/Containerfile), built and run with podman: no image registry is
// reachable here, so the Debian bookworm base is made with mmdebstrap from Debian's mirror and
// imported under the name the Containerfile pulls. Then: the image's metadata (non-root user,
// HEALTHCHECK, port, state volume), every shared library of the binary present, and a container
// started the way the Kubernetes Deployment starts it — read-only root filesystem, /tmp a tmpfs,
// models mounted read-only at /models, state at /var/lib/glassbox, settings from GLASSBOX_CONFIG
// and GLASSBOX_* — answers /ready, serves a completion to the OpenAI SDK, writes an audited
// intervention into its SQLite store on the state volume, passes its HEALTHCHECK, and on SIGTERM
// drains a running stream and exits 0.
//
// Env: GB_IMAGE_WORKDIR (podman's storage and the base tarball; kept between runs so a rerun
// reuses the base and the cached layers), GB_E2E_SHARED (../shared).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { require } from '../e2e/server_process.mjs';

const OpenAI = require('openai');
const REPO = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const WORK = process.env.GB_IMAGE_WORKDIR ?? assert.fail('GB_IMAGE_WORKDIR: where podman keeps its storage');
const SHARED = process.env.GB_E2E_SHARED ?? assert.fail('GB_E2E_SHARED: the shared test data');
const IMAGE = 'localhost/glassbox:test';
const BASES = ['docker.io/library/debian:bookworm', 'docker.io/library/debian:bookworm-slim'];
const NAME = `glassbox-image-test-${process.pid}`;
const ADMIN_KEY = 'sk-image-admin';

mkdirSync(WORK, { recursive: true });
// This sandbox (and CI's) runs containers as root without systemd or a cgroup v2 hierarchy:
// runc with cgroupfs, and limits the sandbox lets a container set.
const CONF = join(WORK, 'containers.conf');
writeFileSync(CONF, `[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
`);
const ENV = { ...process.env, CONTAINERS_CONF: CONF };
const STORAGE = ['--root', join(WORK, 'storage'), '--runroot', join(WORK, 'run')];

function tool(name) {
  const r = spawnSync(name, ['--version'], { encoding: 'utf8' });
  if (r.error) assert.fail(`${name} not found: scripts/setup.sh installs it (Debian package ${name})`);
}

function podman(args, options = {}) {
  const r = spawnSync('podman', [...STORAGE, ...args], { encoding: 'utf8', env: ENV, maxBuffer: 64 << 20, ...options });
  if (r.status !== 0 && !options.allowFailure) assert.fail(`podman ${args.join(' ')} failed (${r.status}):\n${r.stderr}\n${r.stdout}`);
  return r;
}

after(() => {
  podman(['rm', '-f', '-t', '0', NAME], { allowFailure: true });
});

test('the Containerfile builds on a bookworm base made with mmdebstrap', { timeout: 3_000_000 }, () => {
  tool('podman');
  tool('mmdebstrap');
  if (BASES.some((b) => podman(['image', 'exists', b], { allowFailure: true }).status !== 0)) {
    // Like the Docker Hub image: minbase, no documentation or locales.
    const tar = join(WORK, 'bookworm.tar');
    execFileSync('mmdebstrap', ['--variant=minbase', '--include=ca-certificates',
      '--dpkgopt=path-exclude=/usr/share/man/*', '--dpkgopt=path-exclude=/usr/share/doc/*',
      '--dpkgopt=path-include=/usr/share/doc/*/copyright', '--dpkgopt=path-exclude=/usr/share/locale/*',
      'bookworm', tar], { stdio: ['ignore', 'ignore', 'pipe'] });
    podman(['import', tar, BASES[0]]);
    podman(['tag', BASES[0], BASES[1]]);
  }
  // --network host: the build stages reach Debian's mirror and npm the way this machine does,
  // with this machine's extra CA (a TLS-inspecting proxy's) where it has one.
  const ca = process.env.NODE_EXTRA_CA_CERTS;
  const caArgs = ca && existsSync(ca) ? ['--volume', `${ca}:/run/build-ca.crt:ro`, '--build-arg', 'NODE_EXTRA_CA_CERTS=/run/build-ca.crt'] : [];
  const r = podman(['build', '--pull=never', '--network', 'host', '--format', 'docker', '--layers', ...caArgs,
    '-f', join(REPO, 'deploy', 'Containerfile'), '-t', IMAGE, REPO], { stdio: ['ignore', 'pipe', 'pipe'] });
  assert.match(r.stdout, /Successfully tagged localhost\/glassbox:test/);
});

test('the image: non-root, HEALTHCHECK, port, state volume, every library found', () => {
  const [info] = JSON.parse(podman(['image', 'inspect', IMAGE]).stdout);
  const cfg = info.Config;
  assert.equal(cfg.User, '10001:10001');
  assert.deepEqual(cfg.Entrypoint, ['/usr/local/bin/glassbox']);
  assert.ok(Object.keys(cfg.ExposedPorts ?? {}).includes('8080/tcp'), 'EXPOSE 8080');
  assert.ok(Object.keys(cfg.Volumes ?? {}).includes('/var/lib/glassbox'), 'VOLUME /var/lib/glassbox');
  assert.match(JSON.stringify(info.Config.Healthcheck ?? info.Healthcheck ?? {}), /\/health/, 'HEALTHCHECK on /health');
  const ldd = podman(['run', '--rm', '--network', 'none', '--entrypoint', 'ldd', IMAGE, '/usr/local/bin/glassbox']).stdout;
  assert.doesNotMatch(ldd, /not found/, ldd);
  assert.match(ldd, /libstdc\+\+/);
  const help = podman(['run', '--rm', '--network', 'none', IMAGE, '--help']).stdout;
  assert.match(help, /serve/);
});

const freePort = () => new Promise((res) => {
  const s = createServer().listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => res(p)); });
});

test('a read-only container serves, audits, passes its healthcheck and drains on SIGTERM', { timeout: 600_000 }, async () => {
  const dir = mkdtempSync(join(WORK, 'run-'));
  chmodSync(dir, 0o755);  // the mounted config is read by the image's user
  const state = join(dir, 'state');
  mkdirSync(state);
  chownSync(state, 10001, 10001);  // the image's user owns its state volume, as fsGroup does in the pod
  writeFileSync(join(dir, 'config.yaml'), [
    'model: /models/stories260K', 'served_model_name: stories', 'drain_timeout_s: 20', 'interventions: true',
    'audit_db: /var/lib/glassbox/audit.db', 'keys:', '  - {id: admin, key_env: GLASSBOX_ADMIN_KEY, role: admin}', ''].join('\n'));
  const port = await freePort();
  podman(['run', '-d', '--name', NAME, '--read-only', '--tmpfs', '/tmp', '--network', 'host',
    '-v', `${join(SHARED, 'models')}:/models:ro`, '-v', `${state}:/var/lib/glassbox`, '-v', `${dir}:/etc/glassbox:ro`,
    '-e', 'GLASSBOX_CONFIG=/etc/glassbox/config.yaml', '-e', `GLASSBOX_PORT=${port}`, '-e', 'GLASSBOX_THREADS=1',
    '-e', `GLASSBOX_ADMIN_KEY=${ADMIN_KEY}`, IMAGE]);
  const origin = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    const r = await fetch(`${origin}/ready`).catch(() => null);
    if (r?.status === 200) break;
    const running = podman(['inspect', '-f', '{{.State.Running}}', NAME]).stdout.trim();
    if (running !== 'true' || i > 1200) assert.fail(`container not ready:\n${podman(['logs', NAME]).stderr}`);
    await new Promise((res) => setTimeout(res, 100));
  }

  const client = new OpenAI({ apiKey: ADMIN_KEY, baseURL: `${origin}/v1`, maxRetries: 0 });
  const r = await client.completions.create({ model: 'stories', prompt: 'Once upon a time', max_tokens: 12, temperature: 0 });
  assert.equal(r.usage.completion_tokens, 12);
  assert.ok(r.choices[0].text.length > 0);
  // An intervention is audited: the row lands in SQLite on the state volume, through the read-only root.
  const steered = await client.completions.create({ model: 'stories', prompt: 'Once upon a time', max_tokens: 4, temperature: 0,
    glassbox: { interventions: [{ op: 'scale', point: 'mlp_act', layer: 2, dims: [5, 7], strength: -0.9 }] } });
  assert.equal(steered.usage.completion_tokens, 4);
  const audit = await (await fetch(`${origin}/admin/audit?kind=request`, { headers: { Authorization: `Bearer ${ADMIN_KEY}` } })).json();
  assert.ok(audit.data.length >= 1, `an audit row: ${JSON.stringify(audit)}`);
  assert.ok(existsSync(join(state, 'audit.db')), 'the audit store is on the state volume');

  // The dashboard is installed beside the binary (share/glassbox/ui) and found there.
  const ui = await fetch(`${origin}/ui/`);
  assert.equal(ui.status, 200);
  assert.match(await ui.text(), /<html/i);
  assert.equal((await fetch(`${origin}/ui/vendor/uplot/uPlot.iife.min.js`)).status, 200, 'uPlot in the image');
  assert.equal(podman(['exec', NAME, 'id', '-u']).stdout.trim(), '10001');
  const touch = podman(['exec', NAME, 'touch', '/usr/local/x'], { allowFailure: true });
  assert.notEqual(touch.status, 0);
  assert.match(touch.stderr, /Read-only file system/);
  assert.equal(podman(['healthcheck', 'run', NAME], { allowFailure: true }).status, 0, 'HEALTHCHECK passes');

  // SIGTERM with a stream running: it finishes (drain_timeout_s 20), then the process exits 0.
  const stream = await client.completions.create({ model: 'stories', prompt: 'Once upon a time', max_tokens: 400,
    temperature: 0, ignore_eos: true, stream: true });
  const it = stream[Symbol.asyncIterator]();
  let text = (await it.next()).value.choices[0].text;
  podman(['kill', '--signal', 'TERM', NAME]);
  let finish = null;
  for (;;) {
    const { value, done } = await it.next();
    if (done) break;
    text += value.choices[0]?.text ?? '';
    finish = value.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(finish, 'length', 'the running stream completed during the drain');
  const code = podman(['wait', NAME]).stdout.trim();
  assert.equal(code, '0', `exit code after SIGTERM:\n${podman(['logs', NAME]).stderr}`);
  const logs = podman(['logs', NAME]).stderr;
  assert.match(logs, /received SIGTERM, draining/);
  assert.match(logs, /stopped/);
});
