from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition


def drained(consumer):
    """Whether the consumer has an assignment and has read all of it."""
    assigned = consumer.assignment()
    if not assigned:
        return False
    for tp in consumer.position(assigned):
        if tp.offset < consumer.get_watermark_offsets(tp, timeout=5)[1]:
            return False
    return True


def run_pipeline(bootstrap, source, sink, fence=None):
    """Consume-transform-produce, exactly once: each batch's output and its input offsets are
    committed in one transaction.  Returns when the source is drained, or raises when fenced."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "uppercase", "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "isolation.level": "read_committed",
    })
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "uppercase-1"})
    producer.init_transactions(10)
    consumer.subscribe([source])
    try:
        while True:
            batch = [m for m in consumer.consume(5, timeout=0.1) if not m.error()]
            if not batch:
                if drained(consumer):
                    return
                continue
            producer.begin_transaction()
            for m in batch:
                producer.produce(sink, m.value().upper())
            if fence is not None:
                fence()  # another instance of the application takes over, in the middle of it
            positions = [TopicPartition(m.topic(), m.partition(), m.offset() + 1) for m in batch[-1:]]
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 10)
            producer.commit_transaction(10)
    finally:
        consumer.close()


def test_a_fenced_pipeline_loses_nothing_and_duplicates_nothing(odradek_broker):
    source = odradek_broker.create_topic("words-ck")
    sink = odradek_broker.create_topic("upper-words-ck")
    producer = Producer({"bootstrap.servers": odradek_broker.bootstrap_servers})
    for i in range(10):
        producer.produce(source, f"word-{i}".encode())
    producer.flush(10)

    # the first instance is fenced mid-transaction, as when a second instance starts
    fenced = KafkaException
    try:
        run_pipeline(odradek_broker.bootstrap_servers, source, sink,
                     fence=lambda: odradek_broker.faults.fence("uppercase-1"))
    except fenced as exc:
        assert exc.args[0].code() in (exc.args[0].PRODUCER_FENCED, exc.args[0]._FENCED,
                                      exc.args[0].INVALID_PRODUCER_EPOCH)
    else:
        raise AssertionError("the pipeline was not fenced")

    # the instance that takes over processes every word once
    run_pipeline(odradek_broker.bootstrap_servers, source, sink)

    reader = Consumer({
        "bootstrap.servers": odradek_broker.bootstrap_servers, "group.id": "check-ck",
        "auto.offset.reset": "earliest", "isolation.level": "read_committed",
    })
    reader.assign([TopicPartition(sink, 0, 0)])
    seen = []
    while len(seen) < 10:
        seen += [m.value() for m in reader.consume(10, timeout=1) if not m.error()]
    reader.close()
    assert sorted(seen) == sorted(f"WORD-{i}".encode() for i in range(10))
