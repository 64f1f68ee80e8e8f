// The Kubernetes manifests (deploy/k8s): every kustomization renders offline with `kubectl
// kustomize`, every object validates against the Kubernetes OpenAPI schemas (npm kubernetes-models;
// ServiceMonitor from the Prometheus Operator's, HTTPRoute from the Gateway API's) or, for the
// Inference Extension's CRDs, against their v1alpha2 required fields; and the objects agree with
// each other and with the real server: a glassbox started with the rendered ConfigMap, on the
// container's port, answers every probe path with 200 and exports the metrics the HPA and the
// endpoint picker are configured to read, with the types they expect.
//
// Env: GB_E2E_GLASSBOX (the binary), GB_E2E_SHARED (../shared), GB_KUBECTL (default: kubectl).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { require } from '../e2e/server_process.mjs';

const YAML = require('yaml');
const REPO = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const K8S = join(REPO, 'deploy', 'k8s');
const KUBECTL = process.env.GB_KUBECTL || 'kubectl';
const GLASSBOX = process.env.GB_E2E_GLASSBOX;
const SHARED = process.env.GB_E2E_SHARED;
const KUSTOMIZATIONS = ['base', 'overlays/cpu-small', 'overlays/gpu', 'inference-pool'];

function render(dir) {
  let out;
  try {
    out = execFileSync(KUBECTL, ['kustomize', join(K8S, dir)], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    if (e.code === 'ENOENT') assert.fail(`${KUBECTL} not found: scripts/setup.sh installs kubectl (Debian kubernetes-client)`);
    assert.fail(`kubectl kustomize ${dir} failed:\n${e.stderr}`);
  }
  return YAML.parseAllDocuments(out).map((d) => d.toJS()).filter(Boolean);
}

// apiVersion/kind -> a validator that throws with the schema's message.
function modelClass(apiVersion, kind) {
  const [group, version] = apiVersion.includes('/') ? apiVersion.split('/') : ['', apiVersion];
  const modules = {
    '': `kubernetes-models/${version}`,
    apps: `kubernetes-models/apps/${version}`,
    policy: `kubernetes-models/policy/${version}`,
    autoscaling: `kubernetes-models/autoscaling/${version}`,
    'networking.k8s.io': `kubernetes-models/networking.k8s.io/${version}`,
    'rbac.authorization.k8s.io': `kubernetes-models/rbac.authorization.k8s.io/${version}`,
    'monitoring.coreos.com': `@kubernetes-models/prometheus-operator/monitoring.coreos.com/${version}`,
    'gateway.networking.k8s.io': `@kubernetes-models/gateway-api/gateway.networking.k8s.io/${version}`,
  };
  if (!(group in modules)) return null;
  const Cls = require(modules[group])[kind];
  assert.ok(Cls, `no schema for ${apiVersion} ${kind}`);
  return Cls;
}

// The Inference Extension's CRDs have no published model package: their v1alpha2 required
// fields and types, as the CRD's OpenAPI schema states them.
function validateInferenceCrd(o) {
  assert.equal(o.apiVersion, 'inference.networking.x-k8s.io/v1alpha2', `${o.kind}: apiVersion`);
  const s = o.spec ?? assert.fail(`${o.kind} ${o.metadata?.name}: no spec`);
  if (o.kind === 'InferencePool') {
    assert.ok(s.selector && typeof s.selector === 'object' && Object.keys(s.selector).length > 0, 'InferencePool.spec.selector');
    for (const v of Object.values(s.selector)) assert.equal(typeof v, 'string', 'selector values are strings');
    assert.ok(Number.isInteger(s.targetPortNumber) && s.targetPortNumber >= 1 && s.targetPortNumber <= 65535,
      'InferencePool.spec.targetPortNumber: an integer port');
    assert.equal(typeof s.extensionRef?.name, 'string', 'InferencePool.spec.extensionRef.name');
    for (const k of Object.keys(s)) assert.ok(['selector', 'targetPortNumber', 'extensionRef'].includes(k), `unknown InferencePool.spec.${k}`);
  } else if (o.kind === 'InferenceModel') {
    assert.equal(typeof s.modelName, 'string', 'InferenceModel.spec.modelName');
    assert.equal(typeof s.poolRef?.name, 'string', 'InferenceModel.spec.poolRef.name');
    if (s.criticality !== undefined) assert.ok(['Critical', 'Standard', 'Sheddable'].includes(s.criticality), 'criticality');
    for (const t of s.targetModels ?? []) {
      assert.equal(typeof t.name, 'string', 'targetModels[].name');
      assert.ok(t.weight === undefined || (Number.isInteger(t.weight) && t.weight >= 1 && t.weight <= 1000000), 'targetModels[].weight');
    }
    for (const k of Object.keys(s)) assert.ok(['modelName', 'criticality', 'poolRef', 'targetModels'].includes(k), `unknown InferenceModel.spec.${k}`);
  } else {
    assert.fail(`unknown kind ${o.kind}`);
  }
}

function validate(o) {
  assert.ok(o.apiVersion && o.kind && o.metadata?.name, `object without apiVersion/kind/name: ${JSON.stringify(o).slice(0, 200)}`);
  if (o.apiVersion.startsWith('inference.networking.x-k8s.io/')) return validateInferenceCrd(o);
  const Cls = modelClass(o.apiVersion, o.kind);
  assert.ok(Cls, `no schema known for ${o.apiVersion} ${o.kind}`);
  try {
    new Cls(o).validate();
  } catch (e) {
    assert.fail(`${o.kind} ${o.metadata.name}: ${e.message}`);
  }
}

const find = (objs, kind, name) => objs.find((o) => o.kind === kind && (name === undefined || o.metadata.name === name));
const matches = (selector, labels) => Object.entries(selector).every(([k, v]) => labels[k] === v);

test('every kustomization renders and every object validates against its schema', () => {
  for (const dir of KUSTOMIZATIONS) {
    const objs = render(dir);
    assert.ok(objs.length > 0, `${dir}: nothing rendered`);
    for (const o of objs) validate(o);
  }
});

// A schema check must be able to fail: a wrong type and a missing required field are caught.
test('the validators reject broken objects', () => {
  const deployment = find(render('base'), 'Deployment', 'glassbox');
  const broken = structuredClone(deployment);
  broken.spec.template.spec.containers[0].ports[0].containerPort = 'eighty';
  assert.throws(() => validate(broken), /containerPort/);
  const noSelector = structuredClone(deployment);
  delete noSelector.spec.selector;
  assert.throws(() => validate(noSelector), /selector/);
  const pool = find(render('inference-pool'), 'InferencePool');
  assert.throws(() => validate({ ...pool, spec: { ...pool.spec, targetPortNumber: '8080' } }), /targetPortNumber/);
});

// What must hold together across the objects of one overlay (base and overlays alike).
function checkOverlay(dir) {
  const objs = render(dir);
  const dep = find(objs, 'Deployment', 'glassbox');
  const pod = dep.spec.template;
  const c = pod.spec.containers.find((x) => x.name === 'glassbox');
  const env = Object.fromEntries(c.env.map((e) => [e.name, e]));
  const port = c.ports.find((p) => p.name === 'http');
  assert.ok(port, `${dir}: container port "http"`);
  assert.equal(env.GLASSBOX_PORT?.value, String(port.containerPort), `${dir}: GLASSBOX_PORT = the container port`);

  // Probes: startup + readiness on /ready, liveness on /health, all on the http port.
  assert.equal(c.startupProbe.httpGet.path, '/ready');
  assert.equal(c.readinessProbe.httpGet.path, '/ready');
  assert.equal(c.livenessProbe.httpGet.path, '/health');
  for (const p of [c.startupProbe, c.readinessProbe, c.livenessProbe]) assert.equal(p.httpGet.port, 'http');

  // Security: non-root, read-only root, writable only the state and /tmp volumes.
  assert.equal(pod.spec.securityContext.runAsNonRoot, true);
  assert.equal(c.securityContext.readOnlyRootFilesystem, true);
  assert.equal(c.securityContext.allowPrivilegeEscalation, false);
  const mounts = Object.fromEntries(c.volumeMounts.map((m) => [m.mountPath, m]));
  assert.ok(mounts['/var/lib/glassbox'] && !mounts['/var/lib/glassbox'].readOnly, 'state volume');
  assert.ok(mounts['/tmp'] && !mounts['/tmp'].readOnly, '/tmp volume');
  assert.equal(mounts['/models']?.readOnly, true, 'models read-only');

  // The config: the ConfigMap mounted where GLASSBOX_CONFIG points, its keys' secrets from the Secret.
  const configPath = env.GLASSBOX_CONFIG?.value;
  assert.ok(configPath, `${dir}: GLASSBOX_CONFIG`);
  const cfgMount = mounts[dirname(configPath)];
  assert.ok(cfgMount, `${dir}: a volume at ${dirname(configPath)}`);
  const cfgVolume = pod.spec.volumes.find((v) => v.name === cfgMount.name);
  const cm = find(objs, 'ConfigMap', cfgVolume.configMap.name);
  assert.ok(cm, `${dir}: ConfigMap ${cfgVolume.configMap.name} (the generated name) exists`);
  const configText = cm.data[configPath.split('/').pop()];
  const config = YAML.parse(configText);
  assert.equal(config.port, port.containerPort, `${dir}: config port = container port`);
  for (const k of config.keys ?? []) {
    if (k.key_env) assert.ok(env[k.key_env]?.valueFrom?.secretKeyRef, `${dir}: key ${k.id} from a Secret (${k.key_env})`);
    assert.equal(k.key, undefined, `${dir}: no API key written into the ConfigMap`);
  }
  assert.ok(env.GLASSBOX_AUDIT_DB?.valueFrom?.secretKeyRef, `${dir}: the audit store URL from a Secret`);

  // SIGTERM: the grace period covers preStop + drain_timeout_s.
  const preStop = c.lifecycle?.preStop?.exec?.command ?? [];
  const preStopSeconds = preStop[0] === 'sleep' ? Number(preStop[1]) : 0;
  assert.ok(pod.spec.terminationGracePeriodSeconds > preStopSeconds + (config.drain_timeout_s ?? 30),
    `${dir}: terminationGracePeriodSeconds ${pod.spec.terminationGracePeriodSeconds} <= preStop ${preStopSeconds} + drain ${config.drain_timeout_s}`);

  // Selectors find the pods; the Service and ServiceMonitor name real ports.
  const labels = pod.metadata.labels;
  assert.ok(matches(dep.spec.selector.matchLabels, labels));
  const svc = find(objs, 'Service', 'glassbox');
  assert.ok(matches(svc.spec.selector, labels), `${dir}: Service selects the pods`);
  assert.equal(svc.spec.ports[0].targetPort, 'http');
  assert.ok(matches(find(objs, 'PodDisruptionBudget').spec.selector.matchLabels, labels));
  assert.ok(matches(find(objs, 'NetworkPolicy').spec.podSelector.matchLabels, labels));
  const sm = find(objs, 'ServiceMonitor');
  assert.ok(matches(sm.spec.selector.matchLabels, svc.metadata.labels), `${dir}: ServiceMonitor selects the Service`);
  assert.ok(svc.spec.ports.some((p) => p.name === sm.spec.endpoints[0].port), 'ServiceMonitor port is a Service port');
  assert.equal(sm.spec.endpoints[0].path, '/metrics');
  const hpa = find(objs, 'HorizontalPodAutoscaler');
  assert.equal(hpa.spec.scaleTargetRef.name, dep.metadata.name);
  const pvc = pod.spec.volumes.find((v) => v.persistentVolumeClaim)?.persistentVolumeClaim.claimName;
  assert.ok(find(objs, 'PersistentVolumeClaim', pvc), `${dir}: the models claim ${pvc} exists`);
  return { config, port: port.containerPort, probes: [c.startupProbe, c.readinessProbe, c.livenessProbe].map((p) => p.httpGet.path),
    hpaMetrics: hpa.spec.metrics.map((m) => m.pods.metric.name), labels };
}

// Runs glassbox with an overlay's rendered config the way the pod does (GLASSBOX_CONFIG and the
// Secret's variables), on this machine's model files and a free loopback port.
async function withServer(config, port, fn, model = join(SHARED, 'models', 'stories260K')) {
  assert.ok(GLASSBOX && SHARED, 'GB_E2E_GLASSBOX and GB_E2E_SHARED must be set (ctest sets them)');
  const dir = mkdtempSync(join(tmpdir(), 'glassbox-k8s-'));
  const cfg = { ...config, model, host: '127.0.0.1', port };
  delete cfg.max_model_len;  // the pod's model has a longer context than the stand-in
  writeFileSync(join(dir, 'config.yaml'), YAML.stringify(cfg));
  const proc = spawn(GLASSBOX, ['serve'], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, GLASSBOX_CONFIG: join(dir, 'config.yaml'), GLASSBOX_ADMIN_KEY: 'sk-k8s-admin',
      GLASSBOX_USER_KEY: 'sk-k8s-user', GLASSBOX_AUDIT_DB: join(dir, 'audit.db'), GLASSBOX_THREADS: '1' },
  });
  let stderr = '';
  proc.stderr.on('data', (d) => { stderr += d; });
  try {
    const origin = `http://127.0.0.1:${port}`;
    for (let i = 0; ; i++) {
      if (proc.exitCode !== null) assert.fail(`server exited with ${proc.exitCode}:\n${stderr}`);
      const r = await fetch(`${origin}/ready`).catch(() => null);
      if (r?.status === 200) break;
      if (i > 1200) assert.fail(`server never became ready:\n${stderr}`);
      await new Promise((res) => setTimeout(res, 100));
    }
    await fn(origin);
  } finally {
    proc.kill('SIGKILL');
  }
}

const freePort = () => new Promise((res) => {
  const srv = createServer().listen(0, '127.0.0.1', () => { const p = srv.address().port; srv.close(() => res(p)); });
});

// The metric families of a Prometheus text exposition: name -> type.
function metricTypes(text) {
  const types = new Map();
  for (const m of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) types.set(m[1], m[2]);
  return types;
}

for (const dir of ['base', 'overlays/cpu-small', 'overlays/gpu']) {
  test(`${dir}: the objects agree, and the server answers on the probes and exports what the HPA reads`, async () => {
    const o = checkOverlay(dir);
    // The container port is 8080 in every overlay; a free port stands in for it on this machine.
    const free = await freePort();
    await withServer(o.config, free, async (origin) => {
      for (const path of o.probes) assert.equal((await fetch(origin + path)).status, 200, `${dir}: probe ${path}`);
      const types = metricTypes(await (await fetch(`${origin}/metrics`)).text());
      for (const name of o.hpaMetrics) assert.equal(types.get(name), 'gauge', `${dir}: HPA metric ${name} is an exported gauge`);
    });
  });
}

test('inference-pool: the pool selects the Glassbox pods on their port; the EPP reads metrics the server exports', async () => {
  const objs = render('inference-pool');
  const { labels, port, config } = checkOverlay('overlays/cpu-small');
  const pool = find(objs, 'InferencePool');
  assert.ok(matches(pool.spec.selector, labels), 'InferencePool selector matches the server pods');
  assert.equal(pool.spec.targetPortNumber, port);
  assert.ok(find(objs, 'Service', pool.spec.extensionRef.name), 'extensionRef names the EPP Service');
  const args = find(objs, 'Deployment', 'glassbox-epp').spec.template.spec.containers[0].args;
  const flag = (name) => {
    const i = args.indexOf(`-${name}`);
    assert.ok(i >= 0 && i + 1 < args.length, `EPP flag -${name}`);
    return args[i + 1];
  };
  assert.equal(flag('poolName'), pool.metadata.name);
  const models = objs.filter((o) => o.kind === 'InferenceModel');
  assert.ok(models.some((m) => m.spec.modelName === config.served_model_name), 'an InferenceModel for the served model name');
  for (const m of models) assert.equal(m.spec.poolRef.name, pool.metadata.name);

  // The overlay's config serving a weight variant under the InferenceModel's other name (the
  // Qwen3 fixture and its LoRA adapter stand in for the real model), so the adapter info appears.
  const variant = models.find((m) => m.spec.modelName !== config.served_model_name).spec.modelName;
  const cfg = { ...config, variants: [{ name: variant, path: join(SHARED, 'testdata', 'patches', 'qwen3-lora', 'adapter') }] };
  const free = await freePort();
  await withServer(cfg, free, async (origin) => {
    const text = await (await fetch(`${origin}/metrics`)).text();
    const types = metricTypes(text);
    for (const f of ['totalQueuedRequestsMetric', 'kvCacheUsagePercentageMetric', 'loraInfoMetric'])
      assert.equal(types.get(flag(f)), 'gauge', `-${f} ${flag(f)}: an exported gauge`);
    const kv = Number(text.match(new RegExp(`^${flag('kvCacheUsagePercentageMetric')} (\\S+)$`, 'm'))?.[1]);
    assert.ok(kv >= 0 && kv <= 1, `KV cache usage is a fraction in [0, 1], got ${kv}`);
    // vLLM's label format, which the EPP parses: max_lora and the adapter lists.
    const lora = text.match(new RegExp(`^${flag('loraInfoMetric')}\\{([^}]*)\\} (\\S+)$`, 'm'));
    assert.ok(lora, 'a lora info sample');
    assert.match(lora[1], /max_lora="1"/);
    assert.match(lora[1], /running_lora_adapters="[^"]*"/);
    assert.match(lora[1], /waiting_lora_adapters="[^"]*"/);
    assert.ok(Number(lora[2]) > 1.7e9, 'the value is a unix timestamp');
  }, join(SHARED, 'testdata', 'reference', 'qwen3-qknorm', 'hf'));
});
