//! The fast Avro reader (`avro_fields`) against the generic decoding
//! (`schema`), field by field: a file of its own, so that neither of the
//! two imports the other.

use apache_avro::types::{Record as AvroRecord, Value as AvroValue};

use super::fields::Record as _;
use super::schema::Schema;
use super::wire::Framed;

/// A writer schema of a studio's own: the event fields typed otherwise,
/// some left out or null, and fields of other types around them.
const STUDIO: &str = r#"{"type": "record", "name": "Match", "fields": [
    {"name": "level", "type": {"type": "array", "items": "int"}},
    {"name": "event_id", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "type", "type": "string"},
    {"name": "player_id", "type": ["null", "string"]},
    {"name": "blob", "type": "bytes"},
    {"name": "score", "type": ["null", "int", "double", "string"]},
    {"name": "ts", "type": ["string", "long"]},
    {"name": "attrs", "type": ["null", {"type": "map", "values": "string"}]},
    {"name": "scores", "type": ["null", {"type": "map", "values": ["long", "double"]}]},
    {"name": "where", "type": {"type": "record", "name": "Where", "fields": [{"name": "x", "type": "float"}]}}
]}"#;

fn studio_body(schema: &apache_avro::Schema, score: AvroValue, player: AvroValue, ts: AvroValue) -> Vec<u8> {
    let mut r = AvroRecord::new(schema).unwrap();
    r.put("level", AvroValue::Array(vec![AvroValue::Int(3)]));
    r.put("event_id", AvroValue::Uuid("0b8e3f5e-4c39-4a53-9b7e-2f1f1f4a0c11".parse().unwrap()));
    r.put("type", "match_finished");
    r.put("player_id", player);
    r.put("blob", AvroValue::Bytes(vec![1, 2, 3]));
    r.put("score", score);
    r.put("ts", ts);
    r.put("attrs", AvroValue::Union(1, Box::new(AvroValue::Map([("track".to_string(), "monza".into())].into()))));
    let scores = [
        ("wins".to_string(), AvroValue::Union(0, Box::new(AvroValue::Long(3)))),
        ("time_ms".to_string(), AvroValue::Union(1, Box::new(AvroValue::Double(53000.0)))),
    ];
    r.put("scores", AvroValue::Union(1, Box::new(AvroValue::Map(scores.into()))));
    r.put("where", AvroValue::Record(vec![("x".into(), AvroValue::Float(1.5))]));
    apache_avro::to_avro_datum(schema, r).unwrap()
}

#[test]
fn the_fast_way_reads_every_field_as_the_generic_way_does() {
    let schema = Schema::avro(STUDIO).unwrap();
    let Schema::Avro(avro, _, fast) = &schema else { panic!() };
    assert!(fast.is_some(), "a studio schema whose event fields are plain is read the fast way");
    let u = |i: u32, v: AvroValue| AvroValue::Union(i, Box::new(v));
    let cases = [
        (u(1, AvroValue::Int(-42)), u(1, "alice".into()), u(1, AvroValue::Long(1_786_100_400_000))),
        (u(2, AvroValue::Double(100.0)), u(0, AvroValue::Null), u(0, "2026-08-14T10:00:00Z".into())),
        (u(2, AvroValue::Double(0.5)), u(1, "bob".into()), u(1, AvroValue::Long(-1))),
        (u(2, AvroValue::Double(f64::NAN)), u(1, "carol".into()), u(1, AvroValue::Long(0))),
        (u(3, "12".into()), u(1, "".into()), u(0, "".into())),
        (u(0, AvroValue::Null), u(1, "dan".into()), u(1, AvroValue::Long(i64::MAX))),
    ];
    for (score, player, ts) in cases {
        let bytes = studio_body(avro, score, player, ts);
        let framed = Framed { schema_id: 1, indexes: vec![], body: &bytes };
        let (mut quick, mut generic) = (schema.decode(&framed, true).unwrap(), schema.decode(&framed, false).unwrap());
        for field in super::fields::FIELDS {
            let path = [field.to_string()];
            assert_eq!(quick.take(&path), generic.take(&path), "{field} of {bytes:?}");
        }
    }
}

#[test]
fn a_schema_whose_event_fields_are_not_plain_takes_the_generic_way() {
    for score in
        [r#""bytes""#, r#"{"type": "enum", "name": "S", "symbols": ["A"]}"#, r#"{"type": "array", "items": "long"}"#]
    {
        let text = format!(r#"{{"type": "record", "name": "E", "fields": [{{"name": "score", "type": {score}}}]}}"#);
        let Schema::Avro(_, _, fast) = Schema::avro(&text).unwrap() else { panic!() };
        assert!(fast.is_none(), "{score}");
    }
    let Schema::Avro(_, _, fast) = Schema::avro(r#"{"type": "array", "items": "long"}"#).unwrap() else { panic!() };
    assert!(fast.is_none(), "not a record");
}
