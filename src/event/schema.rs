//! Avro and Protobuf schemas, and the decoding of a framed record's body
//! into the JSON value the event rules read (`parse_record`). The decoding
//! is the field's libraries' (`apache-avro`; `prost-reflect` for Protobuf
//! without generated code, `protox` to compile a `.proto` text); only the
//! framing is ours (`wire`). Pure: a schema's text comes from a file named
//! in the config or from the Schema Registry (`crate::schemas`).

use std::fmt;
use std::path::Path;

use std::sync::Arc;

use apache_avro::headers::HeaderBuilder;
use apache_avro::types::Value as AvroValue;
use apache_avro::GenericSingleObjectReader;
use prost::Message as _;
use prost_reflect::{
    DescriptorPool, DynamicMessage, FileDescriptor, MapKey, MessageDescriptor, ReflectMessage, SerializeOptions,
    Value as PValue,
};
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver};
use serde_json::Value;

use super::avro_fields::{EventFields, FastAvro};
use super::event_message::{event_shape, EventMessage};
use super::fields::Record;
use super::wire::Framed;

/// rankflow's event as an Avro schema and as a Protobuf file (its first
/// message), published beside the JSON Schema.
pub const EVENT_AVSC: &str = include_str!("../../schemas/event.avsc");
pub const EVENT_PROTO: &str = include_str!("../../schemas/event.proto");

/// The name a `.proto` text is compiled under.
const PROTO_NAME: &str = "schema.proto";

/// A schema a record's frame can name.
#[derive(Clone)]
pub enum Schema {
    /// The schema, a reader of its data that resolved its names once, and
    /// the fast reader of its event fields where it has one (`avro_fields`).
    Avro(apache_avro::Schema, Arc<GenericSingleObjectReader>, Option<Arc<FastAvro>>),
    /// The `.proto` file the message indexes count messages in, and which
    /// of its top-level messages is shaped like rankflow's own event, if
    /// one is (decoded the fast way, `event_message`), and whether that
    /// one has `scores`.
    Protobuf(FileDescriptor, Option<(usize, bool)>),
}

/// Which format a schema is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Avro,
    Protobuf,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Avro => "Avro",
            Kind::Protobuf => "Protobuf",
        })
    }
}

impl fmt::Debug for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Schema::Avro(s, ..) => write!(f, "Avro({})", s.canonical_form()),
            Schema::Protobuf(file, _) => write!(f, "Protobuf({})", file.name()),
        }
    }
}

/// A file that serves one `.proto` text by its name (the Google
/// well-known types come from `protox`'s own copies).
struct Text(String);

impl FileResolver for Text {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        if name == PROTO_NAME {
            File::from_source(name, &self.0)
        } else {
            Err(protox::Error::file_not_found(name))
        }
    }
}

impl Schema {
    /// An Avro schema from its JSON text (an `.avsc`).
    pub fn avro(text: &str) -> Result<Schema, String> {
        let schema = apache_avro::Schema::parse_str(text).map_err(|e| format!("not an Avro schema: {e}"))?;
        // A frame's body is a bare datum: the reader expects no header of its own.
        let reader = GenericSingleObjectReader::new_with_header_builder(schema.clone(), NoHeader)
            .map_err(|e| format!("not an Avro schema: {e}"))?;
        let fast = FastAvro::new(&schema, text).map(Arc::new);
        Ok(Schema::Avro(schema, Arc::new(reader), fast))
    }

    /// A Protobuf schema from a `.proto` text; it may import Google's well-known types only.
    pub fn proto(text: &str) -> Result<Schema, String> {
        let mut files = ChainFileResolver::new();
        files.add(Text(text.to_string()));
        files.add(GoogleFileResolver::new());
        let mut compiler = protox::Compiler::with_file_resolver(files);
        compiler.open_file(PROTO_NAME).map_err(|e| format!("not a .proto file: {e}"))?;
        let pool = compiler.descriptor_pool();
        let file = pool.get_file_by_name(PROTO_NAME).ok_or("the .proto file compiled to nothing")?;
        Ok(Schema::protobuf(file))
    }

    /// A Protobuf schema from a compiled descriptor set (`protoc
    /// --include_imports -o`): the schema is its last file, the one the
    /// others are imports of.
    pub fn descriptor_set(bytes: &[u8]) -> Result<Schema, String> {
        let pool = DescriptorPool::decode(bytes).map_err(|e| format!("not a Protobuf descriptor set: {e}"))?;
        let file = pool.files().last().ok_or("the descriptor set holds no file")?;
        Ok(Schema::protobuf(file))
    }

    /// A schema from a file: `.avsc` (Avro), `.proto` (Protobuf text), or
    /// anything else read as a compiled descriptor set.
    pub fn from_file(path: &Path) -> Result<Schema, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let text = || String::from_utf8(bytes.clone()).map_err(|_| format!("{} is not UTF-8", path.display()));
        match path.extension().and_then(|e| e.to_str()) {
            Some("avsc") => Schema::avro(&text()?),
            Some("proto") => Schema::proto(&text()?),
            _ => Schema::descriptor_set(&bytes),
        }
    }

    /// A schema from the Schema Registry's answer to `GET /schemas/ids/{id}`:
    /// `{"schema": "...", "schemaType": "AVRO" | "PROTOBUF"}` (no type is
    /// Avro). A Protobuf schema is a `.proto` text, or the base64 of a
    /// serialized file descriptor (the registry's `serialized` format).
    pub fn from_registry(answer: &Value) -> Result<Schema, String> {
        let text = answer.get("schema").and_then(Value::as_str).ok_or("the answer has no 'schema'")?;
        if answer.get("references").and_then(Value::as_array).is_some_and(|r| !r.is_empty()) {
            return Err("the schema has references to other schemas, which this version does not follow".into());
        }
        match answer.get("schemaType").and_then(Value::as_str).unwrap_or("AVRO") {
            "AVRO" => Schema::avro(text),
            "PROTOBUF" => Schema::proto(text).or_else(|e| serialized_file(text).ok_or(e)),
            other => Err(format!("it is a {other} schema; rankflow reads AVRO and PROTOBUF")),
        }
    }

    /// A Protobuf schema of `file`, its event-shaped message found.
    fn protobuf(file: FileDescriptor) -> Schema {
        let fast = file.messages().enumerate().find_map(|(i, m)| Some((i, event_shape(&m)?)));
        Schema::Protobuf(file, fast)
    }

    pub fn kind(&self) -> Kind {
        match self {
            Schema::Avro(..) => Kind::Avro,
            Schema::Protobuf(..) => Kind::Protobuf,
        }
    }

    /// The framed record's body, decoded: an Avro record, or a Protobuf
    /// message (the one the frame's indexes name). `own_names`: the topic
    /// reads every event field by its own name (no `[kafka.fields]` path),
    /// so an Avro record may be read straight into them.
    pub fn decode(&self, framed: &Framed<'_>, own_names: bool) -> Result<Decoded, String> {
        match self {
            Schema::Avro(_, _, Some(fast)) if own_names => fast.decode(framed.body).map(Decoded::Fields),
            Schema::Avro(_, reader, _) => {
                let mut body = framed.body;
                let value = reader
                    .read_value(&mut body)
                    .map_err(|e| format!("the body does not match the Avro schema: {e}"))?;
                if !body.is_empty() {
                    return Err(format!("{} bytes follow the Avro record", body.len()));
                }
                match value {
                    AvroValue::Record(_) => Ok(Decoded::Avro(value)),
                    _ => Err("the Avro schema is not a record".into()),
                }
            }
            Schema::Protobuf(_, Some((fast, with_scores))) if framed.indexes == [*fast] => {
                let message = EventMessage::decode(framed.body)
                    .map_err(|e| format!("the body does not match message rankflow.v1.Event: {e}"))?;
                Ok(Decoded::Event(message, *with_scores))
            }
            Schema::Protobuf(file, _) => {
                let message = message_at(file, &framed.indexes)?;
                DynamicMessage::decode(message.clone(), framed.body)
                    .map(Decoded::Protobuf)
                    .map_err(|e| format!("the body does not match message {}: {e}", message.full_name()))
            }
        }
    }
}

/// No header: a Schema Registry frame's body is the datum alone.
struct NoHeader;

impl HeaderBuilder for NoHeader {
    fn build_header(&self) -> Vec<u8> {
        Vec::new()
    }
}

/// A decoded Avro record or Protobuf message, whose values the event's
/// fields are taken from by path (`fields::Record`), each turned into
/// JSON: Avro longs and Protobuf 64-bit integers as numbers, an Avro
/// `timestamp-millis` as epoch milliseconds, Protobuf fields by their
/// `.proto` names, enums by name, and a Protobuf field without presence
/// left at its default as that default (proto3 leaves it out of the
/// encoding: an absent score is 0).
#[derive(Debug)]
pub enum Decoded {
    Avro(AvroValue),
    Protobuf(DynamicMessage),
    /// A message shaped like rankflow's own event; whether its schema has `scores`.
    Event(EventMessage, bool),
    /// An Avro record's event fields, read the fast way.
    Fields(EventFields),
}

impl Record for Decoded {
    fn take(&mut self, path: &[String]) -> Option<Value> {
        match self {
            Decoded::Avro(record) => {
                let at = path.iter().try_fold(record, |v, key| match unwrap_union(v) {
                    AvroValue::Record(fields) => fields.iter_mut().find(|(name, _)| name == key).map(|(_, v)| v),
                    AvroValue::Map(entries) => entries.get_mut(key),
                    _ => None,
                })?;
                let taken = std::mem::replace(at, AvroValue::Null);
                Value::try_from(taken).ok().filter(|v| !v.is_null())
            }
            Decoded::Event(message, with_scores) => match path {
                [name] => message.take(name, *with_scores),
                _ => None,
            },
            Decoded::Fields(fields) => match path {
                [name] => fields.take(name),
                _ => None,
            },
            Decoded::Protobuf(message) => {
                let (last, parents) = path.split_last()?;
                let mut message = message;
                for key in parents {
                    let field = message.descriptor().get_field_by_name(key)?;
                    match message.get_field_mut(&field) {
                        PValue::Message(inner) => message = inner,
                        _ => return None,
                    }
                }
                let field = message.descriptor().get_field_by_name(last)?;
                if field.supports_presence() && !message.has_field(&field) {
                    return None;
                }
                let value = message.take_field(&field).unwrap_or_else(|| field.default_value());
                Some(proto_json(value, &field.kind()))
            }
        }
    }

    fn into_json(self) -> Value {
        match self {
            Decoded::Avro(record) => Value::try_from(record).unwrap_or_default(),
            Decoded::Protobuf(message) => message_json(&message),
            Decoded::Event(message, with_scores) => message.into_json(with_scores),
            Decoded::Fields(fields) => fields.into_json(),
        }
    }
}

/// A union's value (a record's field of type `["null", "long"]`).
fn unwrap_union(v: &mut AvroValue) -> &mut AvroValue {
    match v {
        AvroValue::Union(_, inner) => unwrap_union(inner),
        other => other,
    }
}

/// A whole message as JSON, by the rules of [`Decoded`].
fn message_json(message: &DynamicMessage) -> Value {
    let options =
        SerializeOptions::new().stringify_64_bit_integers(false).use_proto_field_name(true).skip_default_fields(false);
    message.serialize_with_options(serde_json::value::Serializer, &options).unwrap_or_default()
}

/// One Protobuf value as JSON, by its field's kind.
fn proto_json(value: PValue, kind: &prost_reflect::Kind) -> Value {
    use prost_reflect::Kind as K;
    match value {
        PValue::Bool(b) => Value::Bool(b),
        PValue::I32(n) => n.into(),
        PValue::I64(n) => n.into(),
        PValue::U32(n) => n.into(),
        PValue::U64(n) => n.into(),
        PValue::F32(n) => serde_json::Number::from_f64(n.into()).map_or(Value::Null, Value::Number),
        PValue::F64(n) => serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number),
        PValue::String(s) => Value::String(s),
        PValue::Bytes(b) => {
            use base64::Engine;
            Value::String(base64::engine::general_purpose::STANDARD.encode(b))
        }
        PValue::EnumNumber(n) => match kind {
            K::Enum(e) => e.get_value(n).map_or(n.into(), |v| Value::String(v.name().to_string())),
            _ => n.into(),
        },
        PValue::Message(m) => message_json(&m),
        PValue::List(items) => Value::Array(items.into_iter().map(|v| proto_json(v, kind)).collect()),
        PValue::Map(entries) => {
            let value_kind = match kind {
                K::Message(entry) => entry.map_entry_value_field().kind(),
                other => other.clone(),
            };
            let object = entries.into_iter().map(|(k, v)| (map_key(k), proto_json(v, &value_kind))).collect();
            Value::Object(object)
        }
    }
}

fn map_key(key: MapKey) -> String {
    match key {
        MapKey::String(s) => s,
        MapKey::Bool(b) => b.to_string(),
        MapKey::I32(n) => n.to_string(),
        MapKey::I64(n) => n.to_string(),
        MapKey::U32(n) => n.to_string(),
        MapKey::U64(n) => n.to_string(),
    }
}

/// The message the indexes name: the file's `indexes[0]`th message, then
/// nested messages, in declaration order.
fn message_at(file: &FileDescriptor, indexes: &[usize]) -> Result<MessageDescriptor, String> {
    let path = || indexes.iter().map(usize::to_string).collect::<Vec<_>>().join(", ");
    let (first, nested) = indexes.split_first().ok_or("no message index")?;
    let mut message = file.messages().nth(*first).ok_or_else(|| format!("no message at index [{}]", path()))?;
    for i in nested {
        let child = message.child_messages().nth(*i);
        message = child.ok_or_else(|| format!("no message at index [{}]", path()))?;
    }
    Ok(message)
}

/// A `.proto` file given as the base64 of its serialized descriptor.
fn serialized_file(text: &str) -> Option<Schema> {
    use base64::Engine;
    use prost::Message;
    let bytes = base64::engine::general_purpose::STANDARD.decode(text.trim()).ok()?;
    let mut file = prost_types::FileDescriptorProto::decode(bytes.as_slice()).ok()?;
    file.name = Some(PROTO_NAME.into());
    let set = prost_types::FileDescriptorSet { file: vec![file] };
    let pool = DescriptorPool::from_file_descriptor_set(set).ok()?;
    pool.get_file_by_name(PROTO_NAME).map(Schema::protobuf)
}

#[cfg(test)]
mod tests {
    use apache_avro::types::Record as AvroRecord;
    use prost_reflect::{MapKey, Value as PValue};
    use serde_json::json;

    use super::super::fields::Record as _;
    use super::*;

    const AVSC: &str = EVENT_AVSC;
    const PROTO: &str = EVENT_PROTO;

    fn framed(body: &[u8], indexes: Vec<usize>) -> Framed<'_> {
        Framed { schema_id: 1, indexes, body }
    }

    #[test]
    fn an_avro_record_decodes_to_the_event_fields() {
        let avro = Schema::avro(AVSC).unwrap();
        let Schema::Avro(schema, _, fast) = &avro else { panic!() };
        assert!(fast.is_some(), "rankflow's own event schema is read the fast way");
        let schema = schema.clone();
        let mut r = AvroRecord::new(&schema).unwrap();
        r.put("event_id", "0b8e3f5e-4c39-4a53-9b7e-2f1f1f4a0c11");
        r.put("type", "match_finished");
        r.put("player_id", "alice");
        r.put("score", 9_000_000_000_000i64);
        r.put("ts", apache_avro::types::Value::TimestampMillis(1_786_100_400_000));
        r.put("attrs", apache_avro::types::Value::Map([("region".to_string(), "eu".into())].into()));
        r.put("meta", apache_avro::types::Value::Map(Default::default()));
        r.put("scores", apache_avro::types::Value::Map([("wins".to_string(), 3i64.into())].into()));
        let body = apache_avro::to_avro_datum(&schema, r).unwrap();
        // The fast way (every field by its own name) and the generic way read the same.
        for own_names in [true, false] {
            let value = avro.decode(&framed(&body, vec![]), own_names).unwrap().into_json();
            assert_eq!(
                value,
                json!({"event_id": "0b8e3f5e-4c39-4a53-9b7e-2f1f1f4a0c11", "type": "match_finished", "player_id": "alice",
                       "score": 9_000_000_000_000i64, "ts": 1_786_100_400_000i64, "attrs": {"region": "eu"}, "meta": {}, "scores": {"wins": 3}})
            );
            let short = avro.decode(&framed(&body[..body.len() - 3], vec![]), own_names).unwrap_err();
            assert!(short.starts_with("the body does not match the Avro schema"), "{short}");
            let mut long = body.clone();
            long.push(7);
            assert_eq!(avro.decode(&framed(&long, vec![]), own_names).unwrap_err(), "1 bytes follow the Avro record");
        }
    }

    #[test]
    fn a_protobuf_message_decodes_by_field_name_with_defaults_present() {
        let schema = Schema::proto(PROTO).unwrap();
        let Schema::Protobuf(file, _) = &schema else { panic!() };
        let desc = file.messages().next().unwrap();
        let mut m = DynamicMessage::new(desc.clone());
        m.set_field_by_name("event_id", PValue::String("0b8e3f5e-4c39-4a53-9b7e-2f1f1f4a0c11".into()));
        m.set_field_by_name("type", PValue::String("match_finished".into()));
        m.set_field_by_name("player_id", PValue::String("bob".into()));
        m.set_field_by_name("ts", PValue::I64(1_786_100_400_000));
        let attrs = [(MapKey::String("region".into()), PValue::String("eu".into()))].into();
        m.set_field_by_name("attrs", PValue::Map(attrs));
        let body = prost::Message::encode_to_vec(&m);
        let value = schema.decode(&framed(&body, vec![0]), true).unwrap().into_json();
        // The score was left at 0: proto3 does not encode it, and it counts as 0.
        assert_eq!(value["score"], json!(0));
        assert_eq!(value["ts"], json!(1_786_100_400_000i64));
        assert_eq!(value["player_id"], json!("bob"));
        assert_eq!(value["attrs"], json!({"region": "eu"}));
        assert_eq!(schema.decode(&framed(&body, vec![5]), true).unwrap_err(), "no message at index [5]");
        assert!(schema
            .decode(&framed(&[0xff, 0xff], vec![0]), true)
            .unwrap_err()
            .starts_with("the body does not match"));
    }

    #[test]
    fn nested_messages_are_found_by_their_indexes() {
        let text = "syntax = \"proto3\";\nmessage A { int32 x = 1; }\nmessage B { message C { int64 points = 1; string who = 2; } C c = 1; }\n";
        let schema = Schema::proto(text).unwrap();
        let Schema::Protobuf(file, _) = &schema else { panic!() };
        let c = file.messages().nth(1).unwrap().child_messages().next().unwrap();
        let mut m = DynamicMessage::new(c);
        m.set_field_by_name("points", PValue::I64(42));
        m.set_field_by_name("who", PValue::String("carol".into()));
        let body = prost::Message::encode_to_vec(&m);
        let mut decoded = schema.decode(&framed(&body, vec![1, 0]), true).unwrap();
        assert_eq!(decoded.take(&["who".into()]), Some(json!("carol")));
        assert_eq!(decoded.into_json(), json!({"points": 42, "who": ""}));
    }

    #[test]
    fn registry_answers_give_schemas_by_type() {
        assert_eq!(Schema::from_registry(&json!({"schema": AVSC})).unwrap().kind(), Kind::Avro);
        let proto = json!({"schema": PROTO, "schemaType": "PROTOBUF"});
        assert_eq!(Schema::from_registry(&proto).unwrap().kind(), Kind::Protobuf);
        let Schema::Protobuf(file, _) = Schema::proto(PROTO).unwrap() else { panic!() };
        use base64::Engine;
        let serialized = base64::engine::general_purpose::STANDARD
            .encode(prost::Message::encode_to_vec(file.file_descriptor_proto()));
        let answer = json!({"schema": serialized, "schemaType": "PROTOBUF"});
        assert_eq!(Schema::from_registry(&answer).unwrap().kind(), Kind::Protobuf);
        assert!(Schema::from_registry(&json!({"schema": "{}", "schemaType": "JSON"})).unwrap_err().contains("JSON"));
        assert!(Schema::from_registry(&json!({"schema": "nope"})).unwrap_err().starts_with("not an Avro schema"));
        let refs = json!({"schema": PROTO, "schemaType": "PROTOBUF", "references": [{"name": "x"}]});
        assert!(Schema::from_registry(&refs).unwrap_err().contains("references"));
    }

    /// The event's message as earlier versions of `event.proto` have it: no `scores`.
    const SEVEN: &str = "string event_id = 1; string type = 2; string player_id = 3; int64 score = 4; \
                         int64 ts = 5; map<string, string> attrs = 6; map<string, string> meta = 7;";

    fn proto_of(body: &str) -> Schema {
        Schema::proto(&format!("syntax = \"proto3\";\nmessage E {{ {body} }}\n")).unwrap()
    }

    #[test]
    fn only_a_message_of_the_events_shape_is_taken_for_it() {
        let fast = |schema: Schema| match schema {
            Schema::Protobuf(_, fast) => fast,
            _ => panic!(),
        };
        assert_eq!(fast(Schema::proto(EVENT_PROTO).unwrap()), Some((0, true)));
        assert_eq!(fast(proto_of(SEVEN)), Some((0, false)));
        let eight = format!("{SEVEN} map<string, int64> scores = 8;");
        assert_eq!(fast(proto_of(&eight)), Some((0, true)));
        for other in [
            SEVEN.replace("int64 score", "sint64 score"),
            SEVEN.replace("int64 score", "optional int64 score"),
            SEVEN.replace("ts = 5", "ts = 9"),
            format!("{SEVEN} string extra = 8;"),
            eight.replace("int64> scores", "int32> scores"),
            eight.replace("scores = 8", "scores = 9"),
            format!("{eight} string extra = 9;"),
        ] {
            assert_eq!(fast(proto_of(&other)), None, "{other}");
        }
    }

    #[test]
    fn the_derived_message_reads_what_the_dynamic_one_does() {
        let e = EventMessage {
            event_id: "0b8e3f5e-4c39-4a53-9b7e-2f1f1f4a0c11".into(),
            r#type: "match_finished".into(),
            player_id: "alice".into(),
            score: 0,
            ts: 1_786_100_400_000,
            attrs: [("track".to_string(), "monza".to_string())].into(),
            meta: std::collections::BTreeMap::new(),
            scores: [("wins".to_string(), 3), ("time_ms".to_string(), -53_000)].into(),
        };
        let options = prost_reflect::SerializeOptions::new()
            .stringify_64_bit_integers(false)
            .use_proto_field_name(true)
            .skip_default_fields(false);
        // The published file, and one without scores (whose bodies never carry them).
        let no_scores = EventMessage { scores: Default::default(), ..e.clone() };
        for (schema, e) in [(Schema::proto(EVENT_PROTO).unwrap(), e), (proto_of(SEVEN), no_scores)] {
            let Schema::Protobuf(file, Some((0, with_scores))) = schema else { panic!() };
            let body = prost::Message::encode_to_vec(&e);
            let message = file.messages().next().unwrap();
            let dynamic = prost_reflect::DynamicMessage::decode(message, body.as_slice()).unwrap();
            let want = dynamic.serialize_with_options(serde_json::value::Serializer, &options).unwrap();
            let derived = <EventMessage as prost::Message>::decode(body.as_slice()).unwrap();
            assert_eq!(derived.clone().into_json(with_scores), want);
            let (mut fast, mut slow) = (Decoded::Event(derived, with_scores), Decoded::Protobuf(dynamic));
            for field in super::super::fields::FIELDS {
                let path = [field.to_string()];
                assert_eq!(fast.take(&path), slow.take(&path), "{field}");
            }
        }
    }
}
