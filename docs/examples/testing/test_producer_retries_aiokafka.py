import asyncio

from aiokafka import AIOKafkaProducer


def test_idempotent_producer_writes_each_record_once_across_not_leader_errors(odradek_broker):
    topic = odradek_broker.create_topic("orders-retries-aio")
    # the next three Produce requests for the topic fail as they do while its leader moves
    odradek_broker.faults.fail("Produce", "NOT_LEADER_OR_FOLLOWER", times=3, topic=topic)

    async def produce():
        producer = AIOKafkaProducer(
            bootstrap_servers=odradek_broker.bootstrap_servers, enable_idempotence=True, retry_backoff_ms=10
        )
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait(topic, f"order-{i}".encode())
        finally:
            await producer.stop()

    asyncio.run(produce())

    assert len(odradek_broker.faults.injected) == 3  # the producer did meet the errors...
    assert odradek_broker.end_offsets(topic) == {0: 10}  # ...and its retries wrote no duplicate
