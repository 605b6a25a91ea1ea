"""The columnar Trident word count: whole batches as Arrow record batches.

    trident run examples/trident_columnar_word_count.py [--state redis://127.0.0.1:6379/0]

sentences -> map_batches(split: one Arrow kernel per batch) -> group_by(word) ->
persistent_aggregate(Count) into the counter map "word-counts" (Count runs as an Arrow hash
aggregation per task, the partial counts travel as Arrow IPC buffers, and each batch's
additions go to the store in one atomic write), and, from the same words,
each_batch(length of each word: a new column) -> group_by(length) ->
persistent_aggregate(Count) into "lengths" (a transactional map: words per length) and
persistent_aggregate(Sum of the lengths) into "letters" (one counter, key "$GLOBAL": the
letters of every word). Count and Sum over record batches run as Arrow hash aggregations.
"""

from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc

from transactional import Fields
from transactional.testing import make_corpus
from trident import Count, FixedBatchSpout, Sum, TridentTopology, state

CORPUS = make_corpus(20_000, vocab=2_000)


def split(batch):
    """Sentences -> words, for the whole batch at once."""
    words = pc.list_flatten(pc.utf8_split_whitespace(batch.column("sentence")))
    return pa.RecordBatch.from_arrays([words], names=["word"])


def lengths(batch):
    """The length of each word (a new column; the rows stay)."""
    return pa.RecordBatch.from_arrays([pc.utf8_length(batch.column("word"))], names=["length"])


def build_topology():
    t = TridentTopology("trident-columnar-word-count")
    words = (t.new_stream("sentences", FixedBatchSpout(Fields("sentence"), 2_000, *[(s,) for s in CORPUS]))
             .map_batches(split, Fields("word")))
    words.group_by(Fields("word")).persistent_aggregate(state.counters("word-counts"), Count(), Fields("count"))
    sized = words.each_batch(Fields("word"), lengths, Fields("length"))     # (word, length)
    sized.group_by(Fields("length")).persistent_aggregate(state.transactional("lengths"), Count(), Fields("n"))
    sized.persistent_aggregate(state.counters("letters"), Fields("length"), Sum(), Fields("letters"))
    return t


def report(result):
    want = Counter(w for s in CORPUS for w in s.split())
    words = sorted(want)
    got = dict(zip(words, result.map_state("word-counts").multi_get(words), strict=True))
    by_length = Counter()
    for w, n in want.items():
        by_length[len(w)] += n
    sizes = sorted(by_length)
    got_lengths = dict(zip(sizes, result.map_state("lengths").multi_get(sizes), strict=True))
    letters = result.map_state("letters").get("$GLOBAL")
    want_letters = sum(len(w) * n for w, n in want.items())
    top = sorted(got.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    print("top words:      ", ", ".join(f"{w} {n}" for w, n in top))
    print("words by length:", dict(sorted(got_lengths.items())))
    print("letters:        ", letters)
    print("exact:", got == dict(want) and got_lengths == dict(by_length) and letters == want_letters)
