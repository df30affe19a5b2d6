// BERT's WordPiece tokenizer, as Hugging Face's tokenizers library (Rust) runs it for a BertTokenizer: the ids a
// sentence-transformers model such as all-MiniLM-L6-v2 was trained on, from the model's vocab.txt and
// tokenizer_config.json (do_lower_case, strip_accents, tokenize_chinese_chars and the special tokens).
//   const tok = await loadWordPiece("models/minilm/");             // the folder holding both files
//   const { ids, mask } = tok.encode("A sentence.", 128);          // [CLS] ... [SEP], truncated, padded to 128
//
// The steps, in the library's order:
// 1. the special tokens ([CLS], [MASK], ...) written in the text are matched first, case and all, and kept whole;
// 2. the rest is normalized: control characters (and U+0000, U+FFFD) dropped, every whitespace character made a space,
//    spaces put around each CJK ideograph, accents stripped (NFD, then the nonspacing marks dropped), lowercased letter
//    by letter (no final-sigma rule, as the library does it);
// 3. split into words at whitespace, each punctuation character (ASCII's symbols and Unicode's P categories) a word;
// 4. each word cut into the longest vocabulary pieces from its start ("##" marks a piece that continues a word); a word
//    with a part no piece matches, or of more than 100 characters, is [UNK] as a whole.

import { pageURL } from "./weights.js";

/** The tokenizer_config.json fields used (Hugging Face's names). */
export interface WordPieceConfig {
  do_lower_case?: boolean;
  strip_accents?: boolean | null;          // null: as do_lower_case
  tokenize_chinese_chars?: boolean;
  unk_token?: string; sep_token?: string; pad_token?: string; cls_token?: string; mask_token?: string;
}
/** One text's model inputs: `length` ids and mask values; `tokens` counts the real ones ([CLS] and [SEP] too). */
export interface Encoding { ids: Int32Array; mask: Int32Array; tokens: number; truncated: boolean }

export class TokenizerError extends Error { override name = "TokenizerError"; }

const SPECIALS = { unk_token: "[UNK]", sep_token: "[SEP]", pad_token: "[PAD]", cls_token: "[CLS]", mask_token: "[MASK]" } as const;
const MAX_WORD_CHARS = 100, CONTINUATION = "##";

const isWhitespace = (c: string) => /\p{White_Space}/u.test(c);   // (\t, \n and \r included)
const isControl = (c: string) => c !== "\t" && c !== "\n" && c !== "\r" && /\p{C}/u.test(c);
const isPunctuation = (c: string) => /[!-\/:-@\[-`{-~]|\p{P}/u.test(c);   // (ASCII's $ + < = > ^ ` | ~ count too)
// the CJK Unified Ideographs blocks and their extensions and compatibility blocks (not Hangul, kana or CJK punctuation)
const CJK: [number, number][] = [[0x4e00, 0x9fff], [0x3400, 0x4dbf], [0x20000, 0x2a6df], [0x2a700, 0x2b73f], [0x2b740, 0x2b81f],
                                 [0x2b820, 0x2ceaf], [0xf900, 0xfaff], [0x2f800, 0x2fa1f]];
const isCJK = (c: string) => { const p = c.codePointAt(0)!; return CJK.some(([lo, hi]) => p >= lo && p <= hi); };

export class WordPiece {
  readonly vocab: Map<string, number>;
  readonly lowercase: boolean;
  readonly stripAccents: boolean;
  readonly chineseChars: boolean;
  readonly unk: number;
  readonly cls: number;
  readonly sep: number;
  readonly pad: number;
  #specials: Map<string, number>;
  #specialsRE: RegExp;

  /** `vocab`: vocab.txt's text (a token per line, its id the line's number); `config`: tokenizer_config.json's object. */
  constructor(vocab: string, config: WordPieceConfig = {}) {
    const lines = vocab.split("\n");
    if (lines[lines.length - 1] === "") lines.pop();
    this.vocab = new Map(lines.map((t, i) => [t, i]));
    this.lowercase = config.do_lower_case ?? true;
    this.stripAccents = config.strip_accents ?? this.lowercase;
    this.chineseChars = config.tokenize_chinese_chars ?? true;
    const token = (name: keyof typeof SPECIALS) => config[name] ?? SPECIALS[name];
    const id = (name: keyof typeof SPECIALS) => {
      const i = this.vocab.get(token(name));
      if (i === undefined) throw new TokenizerError(`the ${name} ${JSON.stringify(token(name))} is not in the vocabulary (${lines.length} tokens)`);
      return i;
    };
    this.unk = id("unk_token");
    this.cls = id("cls_token");
    this.sep = id("sep_token");
    this.pad = id("pad_token");
    // (the mask token is matched in texts only where the vocabulary has it)
    const specials = (Object.keys(SPECIALS) as (keyof typeof SPECIALS)[]).map(token).filter((t) => this.vocab.has(t));
    this.#specials = new Map(specials.map((t) => [t, this.vocab.get(t)!]));
    // (longest first: where one special token starts another, the longer wins)
    this.#specialsRE = new RegExp(`(${specials.sort((a, b) => b.length - a.length)
      .map((t) => t.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join("|")})`);
  }

  /** The text's token ids, without [CLS] and [SEP] and not truncated. */
  tokenize(text: string): number[] {
    // (split with a capturing group: the special tokens are the odd parts)
    return text.split(this.#specialsRE).flatMap((part, i) => i % 2 ? [this.#specials.get(part)!] : this.#words(part).flatMap((w) => this.#pieces(w)));
  }

  /** [CLS] ids [SEP] for a model that takes `length` tokens: truncated to fit, then padded, with its attention mask. */
  encode(text: string, length: number): Encoding {
    if (!(Number.isInteger(length) && length >= 2))
      throw new TokenizerError(`encode: length must be an integer >= 2 (room for [CLS] and [SEP]), got ${length}`);
    const pieces = this.tokenize(text), kept = pieces.slice(0, length - 2);
    const ids = new Int32Array(length).fill(this.pad), mask = new Int32Array(length);
    ids.set([this.cls, ...kept, this.sep]);
    mask.fill(1, 0, kept.length + 2);
    return { ids, mask, tokens: kept.length + 2, truncated: kept.length < pieces.length };
  }

  // steps 2 and 3: the normalized text's words
  #words(text: string): string[] {
    let out = "";
    for (const c of text) {
      if (c === "\0" || c === "\ufffd" || isControl(c)) continue;
      out += isWhitespace(c) ? " " : this.chineseChars && isCJK(c) ? ` ${c} ` : c;
    }
    if (this.stripAccents) out = out.normalize("NFD").replace(/\p{Mn}/gu, "");
    if (this.lowercase) out = Array.from(out, (c) => c.toLowerCase()).join("");
    const words: string[] = [];
    for (const chunk of out.split(" ")) {
      let word = "";
      for (const c of chunk) {
        if (!isPunctuation(c)) { word += c; continue; }
        if (word) words.push(word);
        words.push(c);
        word = "";
      }
      if (word) words.push(word);
    }
    return words;
  }

  // step 4: one word's pieces, longest match first
  #pieces(word: string): number[] {
    const chars = Array.from(word);   // (code points: an emoji is one character, as in the library)
    if (chars.length > MAX_WORD_CHARS) return [this.unk];
    const ids: number[] = [];
    for (let start = 0; start < chars.length;) {
      let end = chars.length, id: number | undefined;
      for (; end > start; end--) {
        id = this.vocab.get((start > 0 ? CONTINUATION : "") + chars.slice(start, end).join(""));
        if (id !== undefined) break;
      }
      if (id === undefined) return [this.unk];
      ids.push(id);
      start = end;
    }
    return ids;
  }
}

/** The tokenizer of a model folder (its URL, relative to the page): its vocab.txt and tokenizer_config.json. */
export async function loadWordPiece(folder: string | URL): Promise<WordPiece> {
  const base = new URL(folder, pageURL());
  const get = async (name: string) => {
    const url = new URL(name, base);
    const r = await fetch(url).catch((e: Error) => { throw new TokenizerError(`${url}: ${e.message}`); });
    if (!r.ok) throw new TokenizerError(`${url}: HTTP ${r.status} ${r.statusText} ` +
                                        "(the model folder needs its tokenizer's vocab.txt and tokenizer_config.json)");
    return r.text();
  };
  const [vocab, config] = await Promise.all([get("vocab.txt"), get("tokenizer_config.json")]);
  let parsed: WordPieceConfig;
  try { parsed = JSON.parse(config); }
  catch (e) { throw new TokenizerError(`${new URL("tokenizer_config.json", base)}: not JSON (${(e as Error).message})`); }
  return new WordPiece(vocab, parsed);
}
