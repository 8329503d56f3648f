//! Records in the formats rankflow reads besides JSON, written by
//! serializers no one here wrote: Confluent's own AvroSerializer and
//! ProtobufSerializer (tests/serialize.py, the Python client with its
//! mock:// registry assigning the ids), and the records produced with
//! their headers (CloudEvents).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use serde_json::{json, Value};

use super::Broker;

/// A framed record set: the schema id the serializer registered, and the values.
pub struct Framed {
    pub id: u32,
    pub values: Vec<Vec<u8>>,
}

/// What tests/serialize.py made of a job: per Avro part, then per Protobuf part.
pub struct Serialized {
    pub avro: Vec<Framed>,
    pub protobuf: Vec<Framed>,
}

/// Avro parts as (`.avsc` text, records); Protobuf parts as (message full
/// name, records), their `.proto` files given as (name, text).
pub fn serialize(avro: &[(&str, Vec<Value>)], protos: &[(&str, &str)], protobuf: &[(&str, Vec<Value>)]) -> Serialized {
    let dir = super::temp_dir();
    let descriptors = dir.path().join("descriptors.pb");
    if !protos.is_empty() {
        std::fs::write(&descriptors, descriptor_set(protos, dir.path())).unwrap();
    }
    let job = json!({
        "avro": avro.iter().map(|(schema, records)| json!({"schema": schema, "records": records})).collect::<Vec<_>>(),
        "descriptors": descriptors,
        "protobuf": protobuf.iter().map(|(m, records)| json!({"message": m, "records": records})).collect::<Vec<_>>(),
    });
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../serialize.py");
    let mut child = Command::new("python3")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 (scripts/setup.sh --test installs confluent-kafka)");
    use std::io::Write;
    child.stdin.take().unwrap().write_all(job.to_string().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "serialize.py: {}", String::from_utf8_lossy(&out.stderr));
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    let parts = |name: &str| -> Vec<Framed> {
        answer[name]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| Framed {
                id: p["id"].as_u64().unwrap() as u32,
                values: p["values"].as_array().unwrap().iter().map(|h| hex(h.as_str().unwrap())).collect(),
            })
            .collect()
    };
    Serialized { avro: parts("avro"), protobuf: parts("protobuf") }
}

/// The `.proto` files compiled into a descriptor set (by `protox`, which
/// rankflow also uses: only the Python side writes the records).
fn descriptor_set(protos: &[(&str, &str)], dir: &Path) -> Vec<u8> {
    for (name, text) in protos {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let set = protox::compile(protos.iter().map(|(n, _)| *n), [dir]).expect("the test's .proto files compile");
    prost::Message::encode_to_vec(&set)
}

fn hex(text: &str) -> Vec<u8> {
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap()).collect()
}

/// `[kafka.schemas]` of these schemas, each written to a file of `dir`:
/// (schema id, file name, text) -> `schemas = { "<id>" = "<path>", ... }`.
pub fn schemas_toml(dir: &Path, schemas: &[(u32, &str, &str)]) -> String {
    let entries: Vec<String> = schemas
        .iter()
        .map(|(id, name, text)| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            format!("\"{id}\" = \"{}\"", path.display())
        })
        .collect();
    format!("schemas = {{ {} }}", entries.join(", "))
}

/// A Protobuf frame's single `0` message index rewritten in the explicit
/// form (count 1, index 0: zigzag bytes 2, 0), as other serializers write it.
pub fn explicit_indexes(value: &[u8]) -> Vec<u8> {
    assert_eq!(value[5], 0, "a first message's frame");
    let mut out = value[..5].to_vec();
    out.extend_from_slice(&[2, 0]);
    out.extend_from_slice(&value[6..]);
    out
}

/// One record to produce: key, headers, value.
pub type WithHeaders = (String, Vec<(String, String)>, Vec<u8>);

/// Produces records with their headers, in order.
pub async fn produce_with_headers(broker: &Broker, topic: &str, records: &[WithHeaders]) {
    let producer = broker.producer();
    for (key, headers, value) in records {
        let mut h = OwnedHeaders::new();
        for (name, v) in headers {
            h = h.insert(Header { key: name, value: Some(v.as_bytes()) });
        }
        let r = FutureRecord::to(topic).key(key).payload(value.as_slice()).headers(h);
        producer.send(r, Duration::from_secs(30)).await.map_err(|(e, _)| e).expect("delivered");
    }
}
