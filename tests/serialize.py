"""Frames events as Confluent's own serializers do, for tests/formats.rs.

The Avro and Protobuf records rankflow reads in its tests are written by a
serializer no one here wrote: confluent-kafka's AvroSerializer and
ProtobufSerializer, with the client's mock:// Schema Registry assigning the
schema ids. Reads one JSON object from stdin:

  {"avro": [{"schema": "<.avsc text>", "records": [record, ...]}, ...],
   "descriptors": "<path of a FileDescriptorSet>",
   "protobuf": [{"message": "<full name>", "records": [record, ...]}, ...]}

and writes {"avro": [{"id": n, "values": [hex, ...]}, ...], "protobuf": [...]},
in the same order. Schemas are registered in that order, Avro first, so
the ids are 1, 2, ... A Protobuf message of a file's first message is framed
with the single 0 byte; a nested one with its count and indexes.
"""
import json
import sys

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory


def main():
    job = json.load(sys.stdin)
    registry = SchemaRegistryClient.new_client({"url": "mock://rankflow-tests"})
    out = {"avro": [], "protobuf": []}
    for n, part in enumerate(job.get("avro", [])):
        ser = AvroSerializer(registry, part["schema"], conf={"auto.register.schemas": True})
        ctx = SerializationContext("avro-%d" % n, MessageField.VALUE)
        out["avro"].append(framed([ser(r, ctx) for r in part["records"]]))
    if job.get("protobuf"):
        with open(job["descriptors"], "rb") as f:
            files = descriptor_pb2.FileDescriptorSet.FromString(f.read())
        pool = descriptor_pool.DescriptorPool()
        for file in files.file:
            pool.Add(file)
        for n, part in enumerate(job["protobuf"]):
            cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(part["message"]))
            ser = ProtobufSerializer(cls, registry, {"auto.register.schemas": True, "use.deprecated.format": False})
            ctx = SerializationContext("protobuf-%d" % n, MessageField.VALUE)
            out["protobuf"].append(framed([ser(json_format.ParseDict(r, cls()), ctx) for r in part["records"]]))
    json.dump(out, sys.stdout)


def framed(values):
    return {"id": int.from_bytes(values[0][1:5], "big"), "values": [v.hex() for v in values]}


if __name__ == "__main__":
    main()
