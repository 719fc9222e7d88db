import time

from confluent_kafka import Consumer, KafkaException, Producer


def commit(consumer):
    """Commit what was processed; a coordinator that is away is retried, after a pause (the
    application's own retry loop)."""
    for _ in range(50):
        try:
            consumer.commit(asynchronous=False)
            return
        except KafkaException as exc:
            if not exc.args[0].retriable():
                raise
            time.sleep(0.1)


def test_consumer_survives_a_coordinator_storm_without_reprocessing(odradek_broker):
    topic = odradek_broker.create_topic("payments-ck")
    producer = Producer({"bootstrap.servers": odradek_broker.bootstrap_servers})
    for i in range(20):
        producer.produce(topic, f"payment-{i}".encode())
    producer.flush(10)

    config = {
        "bootstrap.servers": odradek_broker.bootstrap_servers,
        "group.id": "billing-ck",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "heartbeat.interval.ms": 100,
    }
    processed = []
    consumer = Consumer(config)
    consumer.subscribe([topic])
    while len(processed) < 10:
        message = consumer.poll(0.2)
        if message is not None and not message.error():
            processed.append(message.value())
    commit(consumer)

    # the group coordinator fails over: the consumer's heartbeats meet coordinator errors
    faults = odradek_broker.faults
    storm = faults.fail("Heartbeat", "COORDINATOR_NOT_AVAILABLE", times=2)

    while len(processed) < 20 or storm.hits < 2:  # go on consuming through the storm
        message = consumer.poll(0.1)
        if message is not None and not message.error():
            processed.append(message.value())
    commit(consumer)
    consumer.close()

    assert faults.injected  # the consumer met the storm
    assert processed == [f"payment-{i}".encode() for i in range(20)]  # each record once, in order
    # a restarted consumer of the group starts at the last commit: nothing is processed again
    assert odradek_broker.group_lag("billing-ck", topic) == {(topic, 0): 0}
