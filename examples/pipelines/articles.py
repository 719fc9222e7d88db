"""Stream processing as the seeds describe it: an ``articles`` topic, fed from RSS feeds ->
normalised -> deduplicated -> ``articles-clean``.

Input ``articles`` (key: the feed; value: JSON, one item of a feed poll)::

    {"feed": "newsbeat", "url": "http://WWW.Worldwire.example/world/...-412/?utm_source=newsbeat#top",
     "title": "  Markets &amp; money:\\tcentral banks  hold ", "body": "<p>Central banks ...</p>",
     "published": "2024-03-09T12:00:01.000Z", "fetched": "2024-03-09T12:04:00.000Z"}

The same article reaches the topic several times: feeds poll it again and aggregators
re-publish it with a different spelling of its address (``www.``, upper-case host, ``http``,
tracking parameters, fragments, trailing slashes) and of its text (HTML tags and entities,
runs of whitespace).  Normalised:

- ``url``: ``https://`` + host in lower case without ``www.`` + path without trailing
  slashes; query and fragment dropped;
- ``title`` and ``body``: tags removed (a tag becomes a space), the entities ``&amp;``
  ``&lt;`` ``&gt;`` ``&quot;`` ``&#39;`` ``&nbsp;`` decoded, runs of whitespace made one
  space, trimmed; ``words``: words in the body;
- ``id``: the first 16 hex digits of SHA-256 of the normalised URL.

Items without a URL or a title are dropped.  Deduplicated by ``id`` over the whole stream
(``dropDuplicatesWithinWatermark`` with a watermark of :data:`DEDUP_WINDOW` on
``published``: a copy is recognised while it comes at most that long after the newest
article seen), then written as JSON with key ``id`` to ``articles-clean``.  The first copy
seen wins (its ``feed`` is kept).
"""

from __future__ import annotations

import random
from typing import Any

from ._common import (
    EVENT_TIME_FORMAT,
    Event,
    Settings,
    TopicSpec,
    iso_ms,
    json_event,
    read_topic,
    start_query,
)

NAME = "articles"
SUMMARY = 'the seeds\' stream processing: "articles" -> normalised -> deduplicated -> "articles-clean"'
INPUT = "articles"
CLEAN = "articles-clean"
DEDUP_WINDOW = "1 day"

FEEDS = ["worldwire", "daily-planet", "newsbeat", "techwire"]
SECTIONS = ["world", "business", "science", "tech", "sport"]
WORDS = [
    "markets", "central", "banks", "hold", "rates", "storm", "coast", "city", "council", "vote",
    "new", "battery", "chip", "launch", "team", "wins", "final", "record", "heat", "wave", "study",
    "finds", "sleep", "memory", "rail", "strike", "talks", "resume", "budget", "plan", "court",
    "ruling", "river", "flood", "climate", "summit", "deal", "trade", "tariffs", "startup",
    "funding",
]
ENTITIES = [("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ('"', "&quot;"), ("'", "&#39;")]
#: Entities decoded by the normalisation, in this order (``&amp;`` last: ``&amp;lt;`` is ``&lt;``).
DECODE = [("&lt;", "<"), ("&gt;", ">"), ("&quot;", '"'), ("&#39;", "'"), ("&nbsp;", " "), ("&amp;", "&")]


def topics(settings: Settings) -> list[TopicSpec]:
    return [TopicSpec(settings.topic(INPUT), 2), TopicSpec(settings.topic(CLEAN), 2)]


def outputs(settings: Settings) -> list[str]:
    return [f"topic {settings.topic(CLEAN)} (key: article id)"]


def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _mangle_url(rng: random.Random, host: str, path: str, feed: str) -> str:
    scheme = rng.choice(["https", "https", "http"])
    if rng.random() < 0.3:
        host = "www." + host
    if rng.random() < 0.3:
        host = host.upper() if rng.random() < 0.5 else host.capitalize()
    if rng.random() < 0.4:
        path += "/"
    if rng.random() < 0.5:
        path += f"?utm_source={feed}&utm_medium=rss"
    if rng.random() < 0.2:
        path += "#comments"
    url = f"{scheme}://{host}{path}"
    return f"  {url} " if rng.random() < 0.1 else url


def _mangle_text(rng: random.Random, text: str, html: bool) -> str:
    for plain, entity in ENTITIES:  # & first; < and > always (or they would read as tags)
        if plain in "<>" or rng.random() < 0.7:
            text = text.replace(plain, entity)
    words = text.split(" ")
    seps = [rng.choice([" ", " ", " ", "  ", "\t", "\n", " &nbsp;"]) for _ in words[1:]]
    text = words[0] + "".join(s + w for s, w in zip(seps, words[1:]))
    if html and rng.random() < 0.6:
        text = f"<p>{text}</p>" if rng.random() < 0.5 else text.replace(" ", " <b>", 1) + "</b>"
    return rng.choice(["", " ", "\n"]) + text + rng.choice(["", " ", "\t"])


def generate(count: int, seed: int = 1, start_ms: int = 1_710_000_000_000) -> list[Event]:
    """``count`` feed items about ``count / 2`` distinct articles: each article is fetched
    from its publisher's feed 30 s to 10 min after publication, sometimes polled again, and
    re-published by 0-3 other feeds up to 3 h later; 2 % of the items lack a URL."""
    rng = random.Random(seed)
    items: list[tuple[int, int, dict[str, Any]]] = []
    published = start_ms
    n = 0
    while len(items) < count:
        n += 1
        published += rng.randint(60_000, 240_000)
        published -= published % 1000
        feed = rng.choice(FEEDS)
        host = f"{feed.replace('-', '')}.example"
        section = rng.choice(SECTIONS)
        day = iso_ms(published)[:10].replace("-", "/")
        path = f"/{section}/{day}/{'-'.join(_sentence(rng, 3).split())}-{n}"
        title = _sentence(rng, rng.randint(4, 9)).capitalize()
        if rng.random() < 0.3:
            title += " & " + rng.choice(["more", "what's next", 'the "big" question', "why <it> matters"])
        body = ". ".join(_sentence(rng, rng.randint(6, 14)).capitalize() for _ in range(rng.randint(2, 5))) + "."
        copies = [(feed, rng.randint(30_000, 600_000))]
        if rng.random() < 0.15:
            copies.append((feed, copies[0][1] + rng.randint(60_000, 1_800_000)))  # polled again
        others = [f for f in FEEDS if f != feed]
        for other in rng.sample(others, rng.choice([0, 0, 1, 1, 2, 3])):
            copies.append((other, rng.randint(300_000, 3 * 3_600_000)))
        for copy_feed, delay in copies:
            fetched = published + delay
            item: dict[str, Any] = {
                "feed": copy_feed,
                "url": _mangle_url(rng, host, path, copy_feed),
                "title": _mangle_text(rng, title, html=False),
                "body": _mangle_text(rng, body, html=True),
                "published": iso_ms(published),
                "fetched": iso_ms(fetched),
            }
            if rng.random() < 0.02:
                item["url"] = ""
            items.append((fetched, len(items), item))
    items.sort(key=lambda i: (i[0], i[1]))
    return [json_event(item["feed"], item, fetched) for fetched, _, item in items[:count]]


def _clean_text(col: Any) -> Any:
    from pyspark.sql import functions as F

    text = F.regexp_replace(col, "<[^>]*>", " ")
    for entity, plain in DECODE:
        text = F.replace(text, F.lit(entity), F.lit(plain))
    return F.trim(F.regexp_replace(text, r"\s+", " "))


def _canonical_url(col: Any) -> Any:
    from pyspark.sql import functions as F

    url = F.regexp_replace(F.trim(col), r"[?#].*$", "")
    parts = r"^[A-Za-z][A-Za-z0-9+.-]*://([^/]+)(/.*)?$"
    host = F.regexp_replace(F.lower(F.regexp_extract(url, parts, 1)), r"^www\.", "")
    path = F.regexp_replace(F.regexp_extract(url, parts, 2), "/+$", "")
    return F.when(host != "", F.concat(F.lit("https://"), host, path))


def start(spark: Any, settings: Settings) -> list[Any]:
    from pyspark.sql import functions as F

    schema = "feed string, url string, title string, body string, published string, fetched string"
    items = (
        read_topic(spark, settings, settings.topic(INPUT))
        .select(F.from_json(F.col("value").cast("string"), schema).alias("a"))
        .select("a.*")
    )
    clean = (
        items.select(
            _canonical_url(F.col("url")).alias("url"),
            _clean_text(F.col("title")).alias("title"),
            _clean_text(F.coalesce(F.col("body"), F.lit(""))).alias("body"),
            F.try_to_timestamp(F.col("published"), F.lit(EVENT_TIME_FORMAT)).alias("published"),
            "feed",
        )
        .where(F.col("url").isNotNull() & (F.coalesce(F.col("title"), F.lit("")) != "") & F.col("published").isNotNull())
        .withColumn("id", F.substring(F.sha2(F.col("url"), 256), 1, 16))
        .withColumn("words", F.when(F.col("body") == "", 0).otherwise(F.size(F.split(F.col("body"), " "))))
        .withWatermark("published", DEDUP_WINDOW)
        .dropDuplicatesWithinWatermark(["id"])
    )
    records = clean.select(
        F.col("id").alias("key"),
        F.to_json(F.struct("id", "url", "title", "body", "words", "published", "feed")).alias("value"),
    )
    writer = (
        records.writeStream.format("odradek")
        .option("kafka.bootstrap.servers", settings.bootstrap)
        .option("topic", settings.topic(CLEAN))
    )
    return [start_query(writer, settings, NAME, "clean")]
