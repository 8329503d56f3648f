"""Reads every record of a topic over SASL_SSL (SCRAM-SHA-512) with
kafka-python, a Kafka client that shares no code with rankflow or
librdkafka, and prints one JSON object per record: its key and its
rankflow.reason header. tests/secure.rs checks what it prints.

Usage: read_topic.py BOOTSTRAP CA_FILE USER PASSWORD TOPIC PARTITIONS
"""
import json
import sys

from kafka import KafkaConsumer, TopicPartition

bootstrap, ca_file, user, password, topic, partitions = sys.argv[1:7]
consumer = KafkaConsumer(
    bootstrap_servers=bootstrap,
    security_protocol="SASL_SSL",
    ssl_cafile=ca_file,
    sasl_mechanism="SCRAM-SHA-512",
    sasl_plain_username=user,
    sasl_plain_password=password,
    enable_auto_commit=False,
    consumer_timeout_ms=10000,
    # rankflow writes in transactions: what its consumers read.
    isolation_level="read_committed",
)
parts = [TopicPartition(topic, p) for p in range(int(partitions))]
consumer.assign(parts)
consumer.seek_to_beginning(*parts)
# The last stable offsets; commit markers take offsets too, so the reader is
# done once its position passes them, whatever it read.
end = consumer.end_offsets(parts)
done = lambda: all(consumer.position(tp) >= end[tp] for tp in parts)
if not done():
    for record in consumer:
        headers = dict(record.headers or [])
        reason = headers.get("rankflow.reason")
        print(json.dumps({
            "key": record.key.decode() if record.key is not None else None,
            "reason": reason.decode() if reason is not None else None,
        }))
        if done():
            break
if not done():
    sys.exit(f"read_topic: {topic} not read to its end {end}")
