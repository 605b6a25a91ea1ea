"""Storm's TridentWordCount in Python: an exact, persistent word count, and queries of it.

    trident run examples/trident_word_count.py [--state redis://127.0.0.1:6379/0]

Two streams under one txid (each batch holds sentences and queries):

* sentences -> each(Split) -> group_by(word) -> persistent_aggregate(Count) into the map
  "word-counts" (partial counts per task before the shuffle, then one update of the map
  per batch, exactly once);
* queries (one per batch; "cat the dog jumped" is Storm's DRPC example) -> each(Split) ->
  state_query(word-counts, MapGet) -> filter out unknown words -> group_by(query) ->
  persistent_aggregate(Sum) into "query-results" (query -> answer): each answer is the
  total count of the query's words as every *earlier* batch left them (the query of txid 1
  sees nothing counted: no answer).
"""

from collections import Counter

from transactional import Fields
from trident import BaseFilter, BaseFunction, Count, FixedBatchSpout, MapGet, Sum, TridentTopology, state

SENTENCES = ["the cow jumped over the moon", "the man went to the store and bought some candy",
             "four score and seven years ago", "how many apples can you eat",
             "to be or not to be the person"]
ROUNDS = 4                       # the five sentences, four times over
QUERIES = ["the cow", "cat the dog jumped", "the man", "apples and candy", "moon over the store"]
PER_BATCH = 3                    # sentences per batch


class Split(BaseFunction):
    """One tuple per word of the sentence."""

    def execute(self, tuple, collector):
        for word in tuple[0].split():
            collector.emit((word,))


class KnownWord(BaseFilter):
    """Drops the words no batch has counted yet."""

    def is_keep(self, tuple):
        return tuple[0] is not None


def build_topology():
    t = TridentTopology("trident-word-count")
    spout = FixedBatchSpout(Fields("sentence"), PER_BATCH, *[(s,) for s in SENTENCES * ROUNDS])
    word_counts = (t.new_stream("sentences", spout).parallelism_hint(2)
                   .each(Fields("sentence"), Split(), Fields("word"))
                   .group_by(Fields("word"))
                   .persistent_aggregate(state.transactional("word-counts"), Count(), Fields("count"))
                   .parallelism_hint(2))
    queries = FixedBatchSpout(Fields("query"), 1, *[(q,) for q in QUERIES])
    (t.new_stream("queries", queries)
     .each(Fields("query"), Split(), Fields("word"))
     .state_query(word_counts, Fields("word"), MapGet(), Fields("count"))
     .filter(Fields("count"), KnownWord())
     .group_by(Fields("query"))
     .persistent_aggregate(state.transactional("query-results"), Fields("count"), Sum(), Fields("sum")))
    return t


def expected():
    """(word -> count, query -> answer): query i runs in txid i+1 and sees the counts of
    the sentences of txids 1..i (PER_BATCH per batch)."""
    counts = Counter(w for s in SENTENCES * ROUNDS for w in s.split())
    answers = {}
    for i, q in enumerate(QUERIES):
        before = Counter(w for s in (SENTENCES * ROUNDS)[:PER_BATCH * i] for w in s.split())
        answer = sum(before[w] for w in q.split() if before[w])
        if any(before[w] for w in q.split()):
            answers[q] = answer
    return counts, answers


def report(result):
    want_counts, want_answers = expected()
    words = sorted(want_counts)
    counts = dict(zip(words, result.map_state("word-counts").multi_get(words), strict=True))
    answers = {q: a for q, a in zip(QUERIES, result.map_state("query-results").multi_get(QUERIES), strict=True)
               if a is not None}
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:8]
    print("top words:    ", ", ".join(f"{w} {n}" for w, n in top))
    for i, q in enumerate(QUERIES):
        seen = min(PER_BATCH * i, len(SENTENCES) * ROUNDS)
        print(f"query {q!r:22} (txid {i + 1}, after {seen:2} sentences) -> {answers.get(q)}")
    print("exact:", counts == want_counts and answers == want_answers)
