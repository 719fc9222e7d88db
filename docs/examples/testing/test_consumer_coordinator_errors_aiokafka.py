import asyncio

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError


async def commit(consumer):
    """Commit what was processed; a coordinator that is away is retried (an application's own loop)."""
    for _ in range(50):
        try:
            await consumer.commit()
            return
        except KafkaError as exc:
            if not exc.retriable:
                raise
            await asyncio.sleep(0.05)


def test_consumer_survives_a_coordinator_storm_without_reprocessing(odradek_broker):
    topic = odradek_broker.create_topic("payments-aio")
    faults = odradek_broker.faults

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=odradek_broker.bootstrap_servers)
        await producer.start()
        for i in range(20):
            await producer.send(topic, f"payment-{i}".encode())
        await producer.stop()

        consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=odradek_broker.bootstrap_servers, group_id="billing-aio",
            auto_offset_reset="earliest", enable_auto_commit=False, heartbeat_interval_ms=100,
            retry_backoff_ms=10,
        )
        await consumer.start()
        processed = []
        while len(processed) < 10:
            message = await consumer.getone()
            processed.append(message.value)
        await commit(consumer)

        # the group coordinator fails over: the consumer's heartbeats meet coordinator errors
        storm = faults.fail("Heartbeat", "COORDINATOR_NOT_AVAILABLE", times=2)

        while len(processed) < 20 or storm.hits < 2:  # go on consuming through the storm
            batch = await consumer.getmany(timeout_ms=100)
            processed.extend(m.value for messages in batch.values() for m in messages)
        await commit(consumer)
        await consumer.stop()
        return processed

    processed = asyncio.run(run())

    assert faults.injected  # the consumer met the storm
    assert processed == [f"payment-{i}".encode() for i in range(20)]  # each record once, in order
    # a restarted consumer of the group starts at the last commit: nothing is processed again
    assert odradek_broker.group_lag("billing-aio", topic) == {(topic, 0): 0}
