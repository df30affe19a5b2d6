"""Rank sentences by their similarity to a query with all-MiniLM-L6-v2's sentence embeddings (tinyweb.models.bert).

  python -m demos.embed                                        # the built-in query and sentences
  python -m demos.embed "Where can I park my car?" "The garage is behind the station." "Bread goes stale in the fridge."
  python -m demos.embed --device WEBGPU --model DIR "a query" "a sentence" "another sentence"

The first argument is the query, the others the sentences to rank. --model is a sentence-transformers folder; the default
is the one `python -m tests.testdata` fetches ($TINYWEB_TESTDATA/all-MiniLM-L6-v2, by default under ~/.cache/tinyweb/testdata).
Prints the sentences from the most similar down, with their cosine similarity to the query."""
from __future__ import annotations
import argparse, os, sys, time
from typing import Optional, Sequence
from tinyweb import Device
from tinyweb.models.bert import SentenceEncoder

QUERY = "How do I keep bread fresh for longer?"
SENTENCES = [
  "Store the loaf in a paper bag at room temperature, or freeze it in slices.",
  "The train to Berlin leaves from platform 4 at noon.",
  "Sourdough starter needs flour and water every day.",
  "A refrigerator makes bread go stale faster than the counter does.",
  "The museum is closed on Mondays.",
  "Stock prices fell sharply after the announcement.",
]

def default_model() -> str:
  from tests import testdata
  return os.path.join(testdata.folder(), "all-MiniLM-L6-v2")

def rank(encoder: SentenceEncoder, query: str, sentences: Sequence[str]) -> list[tuple[float, str]]:
  """(cosine similarity, sentence) for each sentence, the most similar first. The query and the sentences are one batch."""
  emb = encoder.encode([query, *sentences])
  scores = (emb[1:] @ emb[0]).tolist()
  return sorted(zip(scores, sentences), key=lambda p: -p[0])

def main(argv: Optional[Sequence[str]] = None) -> list[tuple[float, str]]:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("query", nargs="?", default=QUERY)
  ap.add_argument("sentences", nargs="*", help="the sentences to rank (default: a built-in list)")
  ap.add_argument("--model", default=default_model(), help="a sentence-transformers folder (default: %(default)s)")
  ap.add_argument("--device", default=None, help=f"the device (default: {Device.DEFAULT})")
  a = ap.parse_args(argv)
  if not os.path.isfile(os.path.join(a.model, "modules.json")):
    sys.exit(f"{a.model} is not a sentence-transformers folder: give --model, or fetch all-MiniLM-L6-v2 with `python -m tests.testdata`")
  encoder = SentenceEncoder.from_folder(a.model, a.device)
  st = time.perf_counter()
  ranked = rank(encoder, a.query, a.sentences or SENTENCES)
  print(f"query: {a.query}\n(encoded {len(ranked) + 1} sentences on {a.device or Device.DEFAULT} in {time.perf_counter() - st:.2f} s)")
  for score, sentence in ranked: print(f"  {score:6.3f}  {sentence}")
  return ranked

if __name__ == "__main__":
  main()
