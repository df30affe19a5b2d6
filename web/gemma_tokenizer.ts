// Gemma's tokenizer in a page: the same ids as tinyweb.models.gemma.GemmaTokenizer (and so transformers' Gemma tokenizer)
// from the tokenizer.json that `python -m tinyweb.export gemma` writes beside the model (GemmaTokenizer.to_json: the
// GGUF file's vocabulary, token types and special ids).
//
// encode: the text is cut at control and user-defined tokens (leftmost, longest first), which become their ids; each
// piece between them has its spaces made "▁" and is BPE-merged as one word, starting from its characters (a character
// outside the vocabulary: its UTF-8 bytes' <0xXX> tokens), best merge first: the merge that makes the token with the
// lowest id, and of two ways to make it, the one with the longer left part, then the leftmost.
// decode: pieces with "▁" as spaces, runs of byte tokens decoded as UTF-8 (an invalid run: one U+FFFD per byte).
// Strings are walked by code point, as Python does (a JavaScript string's length counts UTF-16 units).

export interface GemmaTokenizerJSON {
  format: "tinyweb-gemma-tokenizer"; tokens: string[]; types: number[]; bos: number; eos: number; unk: number;
  addBos: boolean; addEos: boolean;
}

const CONTROL = 3, USER_DEFINED = 4;   // (llama.cpp's token types)
const SPACE = "\u2581";
const BYTE_TOKEN = /^<0x([0-9A-Fa-f]{2})>$/;

export class GemmaTokenizer {
  readonly bos: number;
  readonly eos: number;
  readonly pieces: string[];
  readonly special: Set<number>;   // left out of decode's text (control tokens, BOS, EOS, unknown)
  readonly #addBos: boolean;
  readonly #addEos: boolean;
  readonly #unk: number;
  readonly #vocab = new Map<string, number>();
  readonly #bytes: (number | undefined)[];
  readonly #added = new Map<string, number>();          // the tokens matched whole in the text
  readonly #addedLengths = new Map<string, number[]>();  // first character -> their lengths (code points), longest first
  readonly #textOf = new Map<number, string>();

  constructor(j: GemmaTokenizerJSON) {
    if (j?.format !== "tinyweb-gemma-tokenizer" || !Array.isArray(j.tokens) || !Array.isArray(j.types))
      throw new Error("not a Gemma tokenizer (tokenizer.json as python -m tinyweb.export gemma writes it)");
    if (j.types.length !== j.tokens.length) throw new Error(`tokenizer: ${j.tokens.length} tokens but ${j.types.length} token types`);
    for (const [what, id] of [["bos", j.bos], ["eos", j.eos], ["unknown", j.unk]] as const)
      if (!(Number.isInteger(id) && id >= 0 && id < j.tokens.length))
        throw new Error(`tokenizer: the ${what} token's id ${id} is not in the vocabulary of ${j.tokens.length}`);
    this.bos = j.bos; this.eos = j.eos; this.#unk = j.unk; this.#addBos = j.addBos; this.#addEos = j.addEos;
    // (a token of spaces is looked up as "▁" runs, so such tokens are renamed first)
    this.pieces = j.tokens.map((t) => t.includes(" ") && t.trim() === "" ? SPACE.repeat([...t].length) : t);
    this.pieces.forEach((p, i) => this.#vocab.set(p, i));
    this.#bytes = Array.from({ length: 256 }, (_, b) => this.#vocab.get(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`));
    this.special = new Set([...j.types.flatMap((k, i) => k === CONTROL ? [i] : []), j.bos, j.eos, j.unk]);
    for (const i of [...this.special].sort((a, b) => a - b)) this.#added.set(j.tokens[i], i);
    j.tokens.forEach((t, i) => { if (j.types[i] === USER_DEFINED && this.#vocab.has(t)) this.#added.set(t, i); });
    for (const t of this.#added.keys()) {
      const chars = [...t];
      if (chars.length) this.#addedLengths.set(chars[0], [...(this.#addedLengths.get(chars[0]) ?? []), chars.length]);
    }
    for (const lengths of this.#addedLengths.values()) lengths.sort((a, b) => b - a);
    for (const [t, i] of this.#added) this.#textOf.set(i, t);
  }

  get size(): number { return this.pieces.length; }

  encode(text: string, addSpecialTokens = true): number[] {
    const chars = [...text], ids = addSpecialTokens && this.#addBos ? [this.bos] : [];
    const word = (from: number, to: number) => this.#bpe(chars.slice(from, to).join("").replaceAll(" ", SPACE));
    let start = 0, i = 0;
    while (i < chars.length) {
      const n = (this.#addedLengths.get(chars[i]) ?? []).find((n) => this.#added.has(chars.slice(i, i + n).join("")));
      if (n === undefined) { i++; continue; }
      ids.push(...word(start, i), this.#added.get(chars.slice(i, i + n).join(""))!);
      start = i = i + n;
    }
    ids.push(...word(start, chars.length));
    if (addSpecialTokens && this.#addEos) ids.push(this.eos);
    return ids;
  }

  #bpe(word: string): number[] {
    const syms: (string | null)[] = [];
    const utf8 = new TextEncoder();
    for (const c of word) {
      if (this.#vocab.has(c)) { syms.push(c); continue; }
      const ids = [...utf8.encode(c)].map((b) => this.#bytes[b]);
      if (ids.includes(undefined)) syms.push(this.pieces[this.#unk]);
      else syms.push(...ids.map((id) => this.pieces[id!]));
    }
    // merged best pair first, as a linked list with a heap of candidate pairs; an entry whose symbols changed since it
    // was pushed (a neighbour merged) is stale and skipped
    const n = syms.length, next = syms.map((_, k) => k + 1), prev = syms.map((_, k) => k - 1);
    const heap = new PairHeap();
    const push = (k: number) => {
      const j = next[k];
      if (j >= n) return;
      const made = this.#vocab.get(syms[k]! + syms[j]!);
      if (made !== undefined) heap.push({ made, leftLength: syms[k]!.length, at: k, left: syms[k]!, right: syms[j]! });
    };
    for (let k = 0; k + 1 < n; k++) push(k);
    for (let p = heap.pop(); p; p = heap.pop()) {
      const i = p.at, j = next[i];
      if (syms[i] !== p.left || j >= n || syms[j] !== p.right) continue;
      syms[i] = p.left + p.right;
      syms[j] = null;
      next[i] = next[j];
      if (next[i] < n) prev[next[i]] = i;
      if (prev[i] >= 0) push(prev[i]);
      push(i);
    }
    return syms.flatMap((s) => s === null ? [] : [this.#vocab.get(s)!]);
  }

  decode(ids: Iterable<number>, skipSpecialTokens = true): string {
    const out: string[] = [], pending: number[] = [];
    const flush = () => {
      if (!pending.length) return;
      try { out.push(new TextDecoder("utf-8", { fatal: true }).decode(Uint8Array.from(pending))); }
      catch { out.push("\uFFFD".repeat(pending.length)); }
      pending.length = 0;
    };
    for (const i of ids) {
      if (!(Number.isInteger(i) && i >= 0 && i < this.pieces.length)) throw new Error(`tokenizer: token id ${i} is not in the vocabulary of ${this.pieces.length}`);
      if (skipSpecialTokens && this.special.has(i)) continue;
      const piece = this.#textOf.get(i) ?? this.pieces[i], byte = BYTE_TOKEN.exec(piece);
      if (byte) pending.push(parseInt(byte[1], 16));
      else { flush(); out.push(piece.replaceAll(SPACE, " ")); }
    }
    flush();
    return out.join("");
  }
}

interface Pair { made: number; leftLength: number; at: number; left: string; right: string }
/** A binary min-heap of merge candidates: the lowest id made first, then the longer left part, then the leftmost. (Two
 * ways of making the same token split the same string, so comparing their left parts in UTF-16 units orders them as
 * in code points.) */
class PairHeap {
  #items: Pair[] = [];
  static #before = (a: Pair, b: Pair) => a.made !== b.made ? a.made < b.made : a.leftLength !== b.leftLength ? a.leftLength > b.leftLength : a.at < b.at;
  push(p: Pair) {
    const h = this.#items;
    let i = h.push(p) - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!PairHeap.#before(h[i], h[parent])) break;
      [h[i], h[parent]] = [h[parent], h[i]];
      i = parent;
    }
  }
  pop(): Pair | undefined {
    const h = this.#items, top = h[0], last = h.pop();
    if (!h.length || last === undefined) return top;
    h[0] = last;
    for (let i = 0; ;) {
      const l = 2 * i + 1, r = l + 1;
      let best = i;
      if (l < h.length && PairHeap.#before(h[l], h[best])) best = l;
      if (r < h.length && PairHeap.#before(h[r], h[best])) best = r;
      if (best === i) break;
      [h[i], h[best]] = [h[best], h[i]];
      i = best;
    }
    return top;
  }
}
