from confluent_kafka import Producer


def test_idempotent_producer_writes_each_record_once_across_not_leader_errors(odradek_broker):
    topic = odradek_broker.create_topic("orders-retries-ck")
    # the next three Produce requests for the topic fail as they do while its leader moves
    odradek_broker.faults.fail("Produce", "NOT_LEADER_OR_FOLLOWER", times=3, topic=topic)

    producer = Producer({
        "bootstrap.servers": odradek_broker.bootstrap_servers,
        "enable.idempotence": True,
        "retry.backoff.ms": 10,
    })
    for i in range(10):
        producer.produce(topic, f"order-{i}".encode())
    assert producer.flush(10) == 0  # every record delivered in the end

    assert len(odradek_broker.faults.injected) == 3  # the producer did meet the errors...
    assert odradek_broker.end_offsets(topic) == {0: 10}  # ...and its retries wrote no duplicate
