"""Example pipelines on Odradek and Spark, from the seeds' use cases.

Each module is one pipeline with its event generator: ``activity`` (website activity
tracking), ``logs`` (log aggregation), ``metrics`` (operational metrics) and ``articles``
(the seeds' stream-processing example).  ``odradek pipeline run NAME`` runs one (see
``runner``); the modules import pyspark only when a pipeline starts, so listing them and
generating events need no Spark.

Every module has the same shape:

- ``NAME``, ``SUMMARY``, ``INPUT`` (the input topic, before any prefix);
- ``topics(settings)``: the topics it reads and writes (:class:`~._common.TopicSpec`);
- ``generate(count, seed, start_ms)``: deterministic events (:class:`~._common.Event`),
  with event-time timestamps, in the order they reach the broker;
- ``start(spark, settings)``: starts its structured-streaming queries and returns them;
- ``outputs(settings)``: where the results go, for people.
"""

PIPELINES = ("activity", "logs", "metrics", "articles")

__all__ = ["PIPELINES"]
