// CLIP's tokenizer in a page: the ids of tinyweb.models.clip.CLIPTokenizer (transformers' CLIPTokenizer, as Stable
// Diffusion's pipelines call it) from the tokenizer.json that `python -m tinyweb.export stable-diffusion` writes beside
// the model (CLIPTokenizer.to_json: the vocabulary, the merges by rank, the added tokens, the special ids).
//
// A text is cut at the added tokens that are not normalized (leftmost, longest first; lstrip / rstrip take the
// whitespace beside them), each piece between them normalized (NFC, each run of whitespace one space, lowercased
// character by character) and cut again at the normalized added tokens; what is left is split by CLIP's pre-tokenizer
// ('s 't 're 've 'm 'll 'd, runs of letters, single digits, runs of anything else; whitespace dropped) and each word
// BPE-merged from its UTF-8 bytes (GPT-2's byte symbols, "</w>" on the last), the merge of lowest rank first, everywhere
// in the word, until none applies. `inputIds` is the pipeline's row: BOS, the ids (at most maxLength - 2), EOS, padding.

export interface ClipAddedToken { id: number; content: string; lstrip: boolean; rstrip: boolean; normalized: boolean }
export interface ClipTokenizerJSON {
  format: "tinyweb-clip-tokenizer"; tokens: string[]; merges: string[]; added: ClipAddedToken[];
  bos: number; eos: number; unk: number; pad: number; maxLength: number;
}

// (tinyweb.models.hub.WHITESPACE: the `tokenizers` library's whitespace, which is not JavaScript's \s)
const WHITESPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000";
const IS_WHITESPACE = new RegExp(`[${WHITESPACE}]`, "u");
const SPECIALS = ["<|startoftext|>", "<|endoftext|>"];
const WORDS = new RegExp(`${SPECIALS.map((s) => s.replaceAll("|", "\\|")).join("|")}|'s|'t|'re|'ve|'m|'ll|'d|\\p{L}+|\\p{N}|` +
                         `[^${WHITESPACE}\\p{L}\\p{N}]+`, "gu");
const SUFFIX = "</w>";

/** GPT-2's byte-level alphabet: the character each byte stands for (the printable Latin-1 bytes themselves, the
 * others U+0100 onwards in byte order). */
function byteSymbols(): string[] {
  const printable = (b: number) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  let next = 0x100;
  return Array.from({ length: 256 }, (_, b) => String.fromCodePoint(printable(b) ? b : next++));
}
const BYTE_SYMBOLS = byteSymbols();

export class ClipTokenizer {
  readonly bos: number;
  readonly eos: number;
  readonly pad: number;
  readonly maxLength: number;
  readonly #unk: number;
  readonly #vocab = new Map<string, number>();
  readonly #ranks = new Map<string, number>();   // "a b" -> its rank (the first, where a merge recurs)
  readonly #raw: ClipAddedToken[];
  readonly #normalized: ClipAddedToken[];
  readonly #cache = new Map<string, number[]>();

  constructor(j: ClipTokenizerJSON) {
    if (j?.format !== "tinyweb-clip-tokenizer" || !Array.isArray(j.tokens) || !Array.isArray(j.merges) || !Array.isArray(j.added))
      throw new Error("not a CLIP tokenizer (tokenizer.json as python -m tinyweb.export stable-diffusion writes it)");
    j.tokens.forEach((t, i) => this.#vocab.set(t, i));
    j.merges.forEach((m, i) => { if (!this.#ranks.has(m)) this.#ranks.set(m, i); });
    const ids = new Set([...j.tokens.keys(), ...j.added.map((t) => t.id)]);
    for (const [what, id] of [["bos", j.bos], ["eos", j.eos], ["unknown", j.unk], ["padding", j.pad]] as const)
      if (!ids.has(id)) throw new Error(`tokenizer: the ${what} token's id ${id} is not in the vocabulary of ${j.tokens.length}`);
    if (!(Number.isInteger(j.maxLength) && j.maxLength >= 2)) throw new Error(`tokenizer: maxLength ${j.maxLength} leaves no room for BOS and EOS`);
    this.bos = j.bos; this.eos = j.eos; this.pad = j.pad; this.#unk = j.unk; this.maxLength = j.maxLength;
    // by content, the last of equal ones kept (as the Python dicts keep it); the normalized ones are matched in
    // normalized text, by their normalized content
    const byContent = (tokens: ClipAddedToken[]) => [...new Map(tokens.map((t) => [t.content, t])).values()];
    this.#raw = byContent(j.added.filter((t) => !t.normalized));
    this.#normalized = byContent(j.added.filter((t) => t.normalized).map((t) => ({ ...t, content: ClipTokenizer.normalize(t.content) })));
  }

  /** NFC, each run of whitespace one space, each character lowercased on its own (a lone capital sigma is σ). */
  static normalize(text: string): string {
    let out = "", space = false;
    for (const c of text.normalize("NFC")) {
      if (IS_WHITESPACE.test(c)) { if (!space) out += " "; space = true; }
      else { out += c.toLowerCase(); space = false; }
    }
    return out;
  }

  /** BOS, the text's ids, EOS (not truncated). */
  encode(text: string): number[] { return [this.bos, ...this.#ids(text), this.eos]; }

  /** The text encoder's input: BOS, the first maxLength - 2 ids, EOS, padded to maxLength. */
  inputIds(text: string): Int32Array {
    const row = Int32Array.from({ length: this.maxLength }, () => this.pad), ids = this.#ids(text).slice(0, this.maxLength - 2);
    row.set([this.bos, ...ids, this.eos]);
    return row;
  }

  #ids(text: string): number[] {
    return splitAdded(text, this.#raw).flatMap((raw) => typeof raw === "number" ? [raw] :
      splitAdded(ClipTokenizer.normalize(raw), this.#normalized).flatMap((piece) => typeof piece === "number" ? [piece] :
        [...piece.matchAll(WORDS)].flatMap(([w]) => SPECIALS.includes(w) ? ["<|", w.slice(2, -2), "|>"] : [w]).flatMap((w) => this.#bpe(w))));
  }

  #bpe(word: string): number[] {
    const cached = this.#cache.get(word);
    if (cached) return cached;
    let symbols = [...new TextEncoder().encode(word)].map((b) => BYTE_SYMBOLS[b]);
    symbols[symbols.length - 1] += SUFFIX;
    while (symbols.length > 1) {
      let best = Infinity, pair = "";
      for (let i = 0; i + 1 < symbols.length; i++) {
        const rank = this.#ranks.get(`${symbols[i]} ${symbols[i + 1]}`);
        if (rank !== undefined && rank < best) { best = rank; pair = `${symbols[i]} ${symbols[i + 1]}`; }
      }
      if (best === Infinity) break;
      const merged: string[] = [];
      for (let i = 0; i < symbols.length; i++) {
        if (i + 1 < symbols.length && `${symbols[i]} ${symbols[i + 1]}` === pair) merged.push(symbols[i] + symbols[++i]);
        else merged.push(symbols[i]);
      }
      symbols = merged;
    }
    const ids = symbols.map((s) => this.#vocab.get(s) ?? this.#unk);
    this.#cache.set(word, ids);
    return ids;
  }
}

/** The text cut at the added tokens (leftmost, longest first): the pieces between them as strings, the tokens as their
 * ids; a token's lstrip / rstrip takes the whitespace on that side with it (tinyweb.models.hub.split_added_tokens). */
function splitAdded(text: string, added: ClipAddedToken[]): (string | number)[] {
  const out: (string | number)[] = [];
  let start = 0, i = 0;
  while (i < text.length) {
    const match = added.filter((t) => t.content && text.startsWith(t.content, i))
      .reduce<ClipAddedToken | null>((a, t) => a === null || t.content.length > a.content.length ? t : a, null);
    if (!match) { i++; continue; }
    let begin = i, end = i + match.content.length;
    if (match.lstrip) while (begin > start && IS_WHITESPACE.test(text[begin - 1])) begin--;
    if (match.rstrip) while (end < text.length && IS_WHITESPACE.test(text[end])) end++;
    if (start < begin) out.push(text.slice(start, begin));
    out.push(match.id);
    start = i = end;
  }
  if (start < text.length) out.push(text.slice(start));
  return out;
}
