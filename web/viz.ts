// The VIZ page (tinyweb/viz.py writes its data next to it): a sidebar of the recorded realizes and their schedule items;
// a realize's schedule (kernels and copies, buffers, times) and tensor graph (an SVG drawn here, in layers by depth);
// a kernel's passes (the uops after each, optionally as a diff with the previous pass) and its generated source.
// Data: viz.json (realizes, kernel names), kernels/<i>.json (a kernel's passes and source, fetched when shown).
// Views are addressed by the URL's hash: #r=<realize> and #r=<realize>&i=<item>[&p=<pass>].

export {};   // (a module: top-level await)

interface GraphNode { label: string; color: string; target: boolean; src: number[] }
interface Graph { total: number; nodes?: GraphNode[]; listing?: string }
interface Buf { device: string; dtype: string; size: number }
interface KernelItem {
  kind: "kernel"; name: string; device: string; kernel: number; writes: number[]; reads: number[];
  built: "now" | "disk" | "earlier"; lower_s: number | null; compile_s: number | null; compiled_with: number;
  launch_s: number; kernel_s: number | null;
}
interface CopyItem { kind: "copy"; name: string; writes: number[]; reads: number[]; seconds: number | null }
type Item = KernelItem | CopyItem;
interface Realize { graph: Graph; schedule_s: number; run_s: number; buffers: Buf[]; items: Item[] }
interface VizData {
  format: number; realizes: Realize[]; kernels: { name: string; device: string }[];
  skipped_realizes: number; max_realizes: number; max_nodes: number;
}
interface Pass { name: string; seconds: number; uops: number; listing: string }
interface Kernel {
  name: string; device: string; ast: string; src: string; same_source: boolean; opts: string[];
  settings: Record<string, number>; global_shape: number[]; flops: number; mem_estimate: number; passes: Pass[];
}

// ---- small DOM helpers

type Child = Node | string;
function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Record<string, string> = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  e.append(...children);
  return e;
}
const SVG = "http://www.w3.org/2000/svg";
function s(tag: string, attrs: Record<string, string | number> = {}, ...children: Child[]): SVGElement {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  e.append(...children);
  return e;
}
const plural = (n: number, one: string, many = one + "s") => `${n} ${n === 1 ? one : many}`;
const fact = (name: string, value: string) => h("span", {}, h("b", {}, name + " "), value);
const ms = (x: number | null | undefined) =>
  x == null ? "–" : x < 1e-3 ? `${(x * 1e6).toFixed(1)} µs` : x < 1 ? `${(x * 1e3).toFixed(2)} ms` : `${x.toFixed(2)} s`;
function bytes(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  for (; n >= 1024 && i < units.length - 1; i++) n /= 1024;
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}
const bufText = (r: Realize, i: number) => { const b = r.buffers[i]; return `b${i} ${b.device} ${b.dtype}[${b.size}]`; };
const itemHref = (ri: number, ii: number) => `#r=${ri}&i=${ii}`;
const kernelsIn = (r: Realize) => r.items.filter((it) => it.kind === "kernel").length;

// ---- the state: the data, the kernels fetched so far, where the page is

const main = document.getElementById("main")!, sidebar = document.getElementById("sidebar")!;
let data: VizData;
const kernels = new Map<number, Promise<Kernel>>();
function kernel(id: number): Promise<Kernel> {
  if (!kernels.has(id)) kernels.set(id, fetch(`kernels/${id}.json`).then((r) => {
    if (!r.ok) throw new Error(`kernels/${id}.json: HTTP ${r.status}`);
    return r.json();
  }));
  return kernels.get(id)!;
}
let showDiff = true;   // pass listings as a diff with the previous pass

// ---- the sidebar: one <details> per realize, its items listed when first opened

const realizeLinks: HTMLDetailsElement[] = [];
function buildSidebar() {
  data.realizes.forEach((r, ri) => {
    const kernelCount = kernelsIn(r), copies = r.items.length - kernelCount;
    const counts = plural(kernelCount, "kernel") + (copies ? `, ${plural(copies, "copy", "copies")}` : "");
    const d = h("details", { "data-realize": String(ri) },
      h("summary", {}, `realize ${ri + 1} `, h("small", {}, `${counts} · ${ms(r.run_s)}`)));
    d.addEventListener("toggle", () => {
      if (d.open && d.children.length === 1)
        d.append(h("a", { href: `#r=${ri}` }, "schedule & graph"),
                 ...r.items.map((it, ii) => h("a", { href: itemHref(ri, ii), class: `item ${it.kind}`, "data-item": String(ii) }, it.name)));
      if (d.open) markCurrent();
    });
    realizeLinks.push(d);
    sidebar.append(d);
  });
}
function markCurrent() {
  for (const a of sidebar.querySelectorAll("a")) a.classList.toggle("current", a.getAttribute("href") === location.hash.split("&p=")[0]);
}

// ---- the realize view: the schedule and the tensor graph

function realizeView(ri: number) {
  const r = data.realizes[ri];
  const rows = r.items.map((it, ii) => {
    const tr = h("tr", { "data-item": String(ii) },
      h("td", { class: "num" }, String(ii)), h("td", {}, h("code", {}, it.name)), h("td", {}, it.kind === "kernel" ? it.device : ""),
      h("td", {}, it.writes.map((b) => bufText(r, b)).join(", ")), h("td", {}, it.reads.map((b) => bufText(r, b)).join(", ")),
      ...(it.kind === "kernel"
        ? [h("td", {}, it.built), h("td", { class: "num" }, ms(it.lower_s)), h("td", { class: "num" }, ms(it.compile_s)),
           h("td", { class: "num" }, ms(it.launch_s)), h("td", { class: "num" }, ms(it.kernel_s))]
        : [h("td", {}, "copy"), h("td"), h("td"), h("td", { class: "num" }, ms(it.seconds)), h("td")]));
    tr.addEventListener("click", () => (location.hash = itemHref(ri, ii)));
    return tr;
  });
  const columns = ["#", "item", "device", "writes", "reads", "built", "lower", "compile", "launch", "kernel"];
  const table = h("table", { id: "schedule" }, h("thead", {}, h("tr", {}, ...columns.map((t) => h("th", {}, t)))), h("tbody", {}, ...rows));
  const kernelCount = kernelsIn(r);
  main.replaceChildren(
    h("h2", {}, `Realize ${ri + 1} `, h("small", {}, `of ${data.realizes.length}`)),
    h("div", { class: "facts" }, fact("kernels", String(kernelCount)), fact("copies", String(r.items.length - kernelCount)),
      fact("buffers", String(r.buffers.length)), fact("schedule", ms(r.schedule_s)), fact("run", ms(r.run_s))),
    h("h3", {}, "Schedule"), table,
    h("h3", {}, `Tensor graph (${r.graph.total} nodes, before scheduling)`), graphView(r.graph));
}

function graphView(g: Graph): HTMLElement {
  if (!g.nodes)
    return h("div", {}, h("p", { class: "notice" }, `${g.total} nodes: too many to draw (more than ${data.max_nodes}); their listing:`),
             h("pre", { id: "graph-listing" }, g.listing ?? ""));
  return h("div", { class: "graph" }, drawGraph(g.nodes));
}

// Layers top to bottom, each node as late as it can be: right above its first user (so an input's chain of views sits
// next to the op that reads it), the targets last. (`nodes` come sources first.) In each layer the nodes are ordered by
// the mean position of their sources (a sweep down), then of their users (a sweep up): fewer crossings.
function drawGraph(nodes: GraphNode[]): SVGElement {
  const depth = nodes.map(() => 0), users: number[][] = nodes.map(() => []);
  nodes.forEach((n, i) => { for (const j of n.src) { depth[i] = Math.max(depth[i], depth[j] + 1); users[j].push(i); } });
  const last = Math.max(...depth);
  for (let i = nodes.length - 1; i >= 0; i--) depth[i] = users[i].length ? Math.min(...users[i].map((u) => depth[u])) - 1 : last;
  const layers: number[][] = Array.from({ length: last + 1 }, () => []);
  nodes.forEach((_, i) => layers[depth[i]].push(i));
  const pos = nodes.map(() => 0);   // position in its layer, 0..1
  const place = (layer: number[]) => layer.forEach((i, k) => (pos[i] = (k + 0.5) / layer.length));
  const mean = (js: number[], i: number) => (js.length ? js.reduce((a, j) => a + pos[j], 0) / js.length : pos[i]);
  layers.forEach(place);
  for (const layer of layers) { layer.sort((a, b) => mean(nodes[a].src, a) - mean(nodes[b].src, b)); place(layer); }
  for (const layer of [...layers].reverse()) { layer.sort((a, b) => mean(users[a], a) - mean(users[b], b)); place(layer); }
  const CH = 6.6, NH = 34, GAP_X = 14, GAP_Y = 30;   // char width (11px monospace), node height, gaps
  const lines = nodes.map((n) => n.label.split("\n"));
  const width = nodes.map((_, i) => Math.max(...lines[i].map((l) => l.length)) * CH + 14);
  const span = (layer: number[]) => layer.reduce((a, i) => a + width[i] + GAP_X, -GAP_X);
  const total = Math.max(...layers.map(span)), x = nodes.map(() => 0);
  for (const layer of layers) {   // (each layer centered)
    let left = 10 + (total - span(layer)) / 2;
    for (const i of layer) { x[i] = left; left += width[i] + GAP_X; }
  }
  const y = (i: number) => 10 + depth[i] * (NH + GAP_Y);
  const edges = nodes.flatMap((n, i) => n.src.map((j) => {
    const x1 = x[j] + width[j] / 2, y1 = y(j) + NH, x2 = x[i] + width[i] / 2, y2 = y(i), my = (y1 + y2) / 2;
    return s("path", { d: `M${x1},${y1} C${x1},${my} ${x2},${my} ${x2},${y2}` });
  }));
  const boxes = nodes.map((n, i) => s("g", { class: n.target ? "node target" : "node", transform: `translate(${x[i]},${y(i)})` },
    s("title", {}, n.label), s("rect", { width: width[i], height: NH, rx: 4, fill: n.color }),
    ...lines[i].map((l, k) => s("text", { x: 7, y: 14 + k * 13 }, l))));
  return s("svg", { id: "graph", width: total + 20, height: y(nodes.length - 1) + NH + 10 }, ...edges, ...boxes);
}

// ---- the item view: a kernel (passes, source, AST) or a copy

async function itemView(ri: number, ii: number, passName: string | null) {
  const r = data.realizes[ri], it = r.items[ii];
  const crumbs = h("div", { class: "crumbs" }, h("a", { href: `#r=${ri}` }, `realize ${ri + 1}`), ` › item ${ii}`);
  const io = h("div", { class: "facts" }, fact("writes", it.writes.map((b) => bufText(r, b)).join(", ")),
    fact("reads", it.reads.map((b) => bufText(r, b)).join(", ") || "–"));
  if (it.kind === "copy") {
    main.replaceChildren(crumbs, h("h2", {}, it.name), io, h("div", { class: "facts" }, fact("time", ms(it.seconds))));
    return;
  }
  main.replaceChildren(crumbs, h("h2", {}, it.name, " ", h("small", {}, it.device)), io, h("p", {}, "loading…"));
  const k = await kernel(it.kernel);
  if (location.hash.split("&p=")[0] !== itemHref(ri, ii)) return;   // (navigated elsewhere meanwhile)
  const built = { now: "lowered in this realize", disk: "read from the disk cache of lowered kernels",
                  earlier: "built by an earlier realize" }[it.built];
  const compiled = it.compile_s != null ? ms(it.compile_s) + (it.compiled_with > 1 ? ` (with ${plural(it.compiled_with - 1, "other")})` : "")
    : it.built === "earlier" ? "–" : "read from the disk cache of compiled kernels";
  const facts = h("div", { class: "facts" },
    fact("shape", `(${k.global_shape.join(", ")})`), fact("FLOPs", k.flops.toLocaleString()), fact("memory", bytes(k.mem_estimate)),
    fact("opts", k.opts.length ? k.opts.join(" ") : "none"),
    fact("settings", Object.entries(k.settings).map(([a, b]) => `${a}=${b}`).join(" ")));
  const times = h("div", { class: "facts" }, fact("built", built), fact("lower+render", ms(it.lower_s)),
    fact("compile", compiled),
    fact("launch", ms(it.launch_s)), fact("kernel", ms(it.kernel_s)));
  const current = k.passes.findIndex((p) => p.name === passName);
  const pi = current >= 0 ? current : k.passes.length - 1;
  const buttons = k.passes.map((p, i) => {
    const b = h("button", { class: i === pi ? "pass current" : "pass", "data-pass": p.name, title: `${p.uops} uops after it, ${ms(p.seconds)}` },
      p.name, " ", h("small", {}, `${p.uops} · ${ms(p.seconds)}`));
    b.addEventListener("click", () => (location.hash = `${itemHref(ri, ii)}&p=${p.name}`));
    return b;
  });
  // the source scrolled to where the kernel's function starts (after the renderer's prelude of helpers)
  const at = k.src.search(new RegExp(`^.*\\b${k.name}\\(`, "m")), start = h("span", { id: "kernel-start" }, k.src.slice(Math.max(at, 0)));
  const source = h("pre", { id: "source" }, k.src.slice(0, Math.max(at, 0)), start);
  const diff = h("input", { type: "checkbox", id: "diff" });
  diff.checked = showDiff;
  diff.addEventListener("change", () => { showDiff = diff.checked; render(); });
  main.replaceChildren(crumbs, h("h2", {}, k.name, " ", h("small", {}, k.device)), facts, times, io,
    ...(k.same_source ? [] : [h("p", { class: "notice" }, "Lowered again for this page, this kernel's source differs from the " +
      "one the engine compiled (shown on the right): the passes may not be exactly those it went through.")]),
    h("div", { class: "kernel-panes" },
      h("section", {}, h("h3", {}, "Passes ", h("label", { class: "toggle" }, diff, " changes from the previous pass")),
        h("div", { class: "passes" }, ...buttons), ...passListing(k.passes, pi)),
      h("section", {}, h("h3", {}, "Source"), source)),
    h("details", {}, h("summary", {}, `AST: the ops fused into this kernel (${k.ast.split("\n").length})`), h("pre", { id: "ast" }, k.ast)));
  if (at > 0) source.scrollTop = start.offsetTop;
}

function passListing(passes: Pass[], i: number): HTMLElement[] {
  const lines = passes[i].listing.split("\n");
  const rows = showDiff && i > 0 ? diffLines(passes[i - 1].listing.split("\n"), lines) : null;
  const pre = h("pre", { id: "listing", "data-pass": passes[i].name });
  const spans = (rows ?? lines.map((text) => ({ text, kind: "same" }))).map(({ text, kind }) => h("span", { class: `line ${kind}` }, text));
  pre.append(h("span", { class: "lines" }, ...spans));
  if (!(showDiff && i > 0 && !rows)) return [pre];
  return [h("p", { class: "notice" }, `${passes[i - 1].name} and ${passes[i].name} are too long to diff: the listing as it is`), pre];
}

// Lines of `b` against `a` (their longest common subsequence): each "same", "add" (only in b) or "del" (only in a).
// null where the table would be too big (a diff of two listings of thousands of lines each).
function diffLines(a: string[], b: string[]): { text: string; kind: string }[] | null {
  const n = a.length, m = b.length, w = m + 1;
  if (n * m > 4e6) return null;
  const t = new Uint32Array((n + 1) * w);   // t[i*w+j]: the LCS length of a[i:] and b[j:]
  for (let i = n - 1; i >= 0; i--)
    for (let j = m - 1; j >= 0; j--) t[i * w + j] = a[i] === b[j] ? t[(i + 1) * w + j + 1] + 1 : Math.max(t[(i + 1) * w + j], t[i * w + j + 1]);
  const out: { text: string; kind: string }[] = [];
  let i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] === b[j]) { out.push({ text: b[j], kind: "same" }); i++; j++; }
    else if (j === m || (i < n && t[(i + 1) * w + j] >= t[i * w + j + 1])) out.push({ text: a[i++], kind: "del" });
    else out.push({ text: b[j++], kind: "add" });
  }
  return out;
}

// ---- routing

function render() {
  const q = new URLSearchParams(location.hash.slice(1));
  const ri = Math.min(Number(q.get("r") ?? 0), data.realizes.length - 1), ii = q.get("i");
  const d = realizeLinks[ri];
  if (!d.open) d.open = true;   // (its toggle event marks the current link)
  markCurrent();
  if (ii === null) realizeView(ri);
  else itemView(ri, Number(ii), q.get("p")).catch(showError);
}

function showError(e: unknown) {
  main.replaceChildren(h("p", { class: "notice", id: "error" }, `VIZ: ${e instanceof Error ? e.message : String(e)}`));
}

try {
  const r = await fetch("viz.json");
  if (!r.ok) throw new Error(`viz.json: HTTP ${r.status} (the page needs the data tinyweb.viz writes next to it)`);
  data = await r.json();
  const launches = data.realizes.reduce((a, r) => a + kernelsIn(r), 0);
  const skipped = data.skipped_realizes
    ? ` · the first ${data.max_realizes} realizes: ${data.skipped_realizes} more were not recorded (VIZ_MAX_REALIZES)` : "";
  document.getElementById("summary")!.textContent = `${plural(data.realizes.length, "realize")}, ` +
    `${plural(launches, "kernel launch", "kernel launches")}, ${plural(data.kernels.length, "distinct kernel")}${skipped}`;
  if (!data.realizes.length) throw new Error("no realize was recorded");
  buildSidebar();
  addEventListener("hashchange", render);
  render();
} catch (e) { showError(e); }
