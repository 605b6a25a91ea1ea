"""Storm-starter's ReachTopology: the reach of a URL, the number of distinct people its
tweets were exposed to, computed on demand by four stages of bolts (Linear DRPC).

    python examples/reach.py        # foo.com/blog/1 -> 16, engineering.twitter.com/blog/5 -> 14, notaurl.com -> 0

1. GetTweeters: the people who tweeted the URL;
2. GetFollowers: the followers of each (12 tasks);
3. PartialUniquer: distinct followers, partitioned by follower (a batch bolt per request);
4. CountAggregator: sums the partial counts of a request (finish_batch runs for every
   request, also one with no tuple: so an unknown URL answers 0).
"""

from transactional import BaseBasicBolt, BaseBatchBolt, Fields, LocalCluster, TopologyConfig, Values
from transactional.drpc import LinearDRPCTopologyBuilder, LocalDRPC

TWEETERS_DB = {
    "foo.com/blog/1": ["sally", "bob", "tim", "george", "nathan"],
    "engineering.twitter.com/blog/5": ["adam", "david", "sally", "nathan"],
    "tech.backtype.com/blog/123": ["tim", "mike", "john"],
}

FOLLOWERS_DB = {
    "sally": ["bob", "tim", "alice", "adam", "jim", "chris", "jai"],
    "bob": ["sally", "nathan", "jim", "mary", "david", "vivian"],
    "tim": ["alex"],
    "nathan": ["sally", "bob", "adam", "harry", "chris", "vivian", "emily", "jordan"],
    "adam": ["david", "carissa"],
    "mike": ["john", "bob"],
    "john": ["alice", "nathan", "jim", "mike", "bob"],
}


class GetTweeters(BaseBasicBolt):
    def execute(self, tuple, collector):
        id, url = tuple[0], tuple[1]
        for tweeter in TWEETERS_DB.get(url, ()):
            collector.emit(Values(id, tweeter))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "tweeter"))


class GetFollowers(BaseBasicBolt):
    def execute(self, tuple, collector):
        id, tweeter = tuple[0], tuple[1]
        for follower in FOLLOWERS_DB.get(tweeter, ()):
            collector.emit(Values(id, follower))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "follower"))


class PartialUniquer(BaseBatchBolt):
    """One instance per request and task: the distinct followers this task saw."""

    def prepare(self, conf, context, collector, id):
        self.collector, self.id, self.followers = collector, id, set()

    def execute(self, tuple):
        self.followers.add(tuple[1])

    def finish_batch(self):
        self.collector.emit(Values(self.id, len(self.followers)))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "partial-count"))


class CountAggregator(BaseBatchBolt):
    def prepare(self, conf, context, collector, id):
        self.collector, self.id, self.count = collector, id, 0

    def execute(self, tuple):
        self.count += tuple[1]

    def finish_batch(self):
        self.collector.emit(Values(self.id, self.count))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "reach"))


def construct() -> LinearDRPCTopologyBuilder:
    """The builder of the "reach" function, as storm-starter's ``construct()``."""
    builder = LinearDRPCTopologyBuilder("reach")
    builder.add_bolt(GetTweeters(), 4)
    builder.add_bolt(GetFollowers(), 12).shuffle_grouping()
    builder.add_bolt(PartialUniquer(), 6).fields_grouping(Fields("id", "follower"))
    builder.add_bolt(CountAggregator(), 3).fields_grouping(Fields("id"))
    return builder


def main(config=None):
    drpc = LocalDRPC()
    with LocalCluster() as cluster:
        cluster.submit_topology("reach-drpc", config or TopologyConfig(progress=False),
                                construct().create_local_topology(drpc))
        for url in ("foo.com/blog/1", "engineering.twitter.com/blog/5", "notaurl.com"):
            print(f"Reach of {url}: {drpc.execute('reach', url)}")


if __name__ == "__main__":
    main()
