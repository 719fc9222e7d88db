import asyncio

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import InvalidProducerEpoch, ProducerFenced


async def run_pipeline(bootstrap, source, sink, fence=None):
    """Consume-transform-produce, exactly once: each batch's output and its input offsets are
    committed in one transaction.  Returns when the source is drained, or raises when fenced."""
    consumer = AIOKafkaConsumer(
        source, bootstrap_servers=bootstrap, group_id="uppercase-aio", enable_auto_commit=False,
        auto_offset_reset="earliest", isolation_level="read_committed",
    )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="uppercase-aio-1")
    await consumer.start()
    await producer.start()
    try:
        while True:
            batch = await consumer.getmany(timeout_ms=100, max_records=5)
            if not batch:
                ends = await consumer.end_offsets(list(consumer.assignment()))
                if ends and all([await consumer.position(tp) >= end for tp, end in ends.items()]):
                    return  # drained
                continue
            async with producer.transaction():
                for messages in batch.values():
                    for m in messages:
                        await producer.send(sink, m.value.upper())
                if fence is not None:
                    fence()  # another instance of the application takes over, in the middle of it
                offsets = {tp: messages[-1].offset + 1 for tp, messages in batch.items()}
                await producer.send_offsets_to_transaction(offsets, "uppercase-aio")
    finally:
        await producer.stop()
        await consumer.stop()


def test_a_fenced_pipeline_loses_nothing_and_duplicates_nothing(odradek_broker):
    source = odradek_broker.create_topic("words-aio")
    sink = odradek_broker.create_topic("upper-words-aio")
    bootstrap = odradek_broker.bootstrap_servers

    async def scenario():
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        for i in range(10):
            await producer.send(source, f"word-{i}".encode())
        await producer.stop()

        # the first instance is fenced mid-transaction, as when a second instance starts
        try:
            await run_pipeline(bootstrap, source, sink, fence=lambda: odradek_broker.faults.fence("uppercase-aio-1"))
        except (ProducerFenced, InvalidProducerEpoch):
            pass
        else:
            raise AssertionError("the pipeline was not fenced")

        # the instance that takes over processes every word once
        await run_pipeline(bootstrap, source, sink)

        reader = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
        await reader.start()
        reader.assign([TopicPartition(sink, 0)])
        await reader.seek_to_beginning()
        seen = []
        while len(seen) < 10:
            batch = await reader.getmany(timeout_ms=1000)
            seen += [m.value for messages in batch.values() for m in messages]
        await reader.stop()
        return seen

    seen = asyncio.run(scenario())
    assert sorted(seen) == sorted(f"WORD-{i}".encode() for i in range(10))
