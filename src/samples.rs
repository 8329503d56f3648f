//! A generator of realistic sample events for the demo and the benchmarks:
//! a fixed population of players, match results (score deltas, some
//! negative) and lap times on a few tracks, with optional producer
//! duplicates, bad records and display names as `meta`. Deterministic for a
//! seed; pure (it makes record values, it sends nothing).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::config::Settings;
use crate::event::schema::{Kind, Schema};
use crate::event::{wire, Format};

pub const TRACKS: [&str; 3] = ["monza", "spa", "suzuka"];

/// Display names of the demo's players (with their number).
const NAMES: [&str; 8] = ["Ada", "Bo", "Cleo", "Dev", "Eun", "Femi", "Gus", "Hana"];

/// One generated record.
pub struct Sample {
    pub key: String,
    pub value: Vec<u8>,
}

pub struct Generator {
    rng: StdRng,
    players: usize,
    /// Event time of the next event, epoch ms.
    ts_ms: i64,
    step_ms: i64,
    dup_ratio: f64,
    bad_ratio: f64,
    /// Whether events carry `meta = {"name": ...}`.
    names: bool,
    /// Whether matches carry `scores = {"wins": ..., "kills": ...}`.
    columns: bool,
    last: Option<Sample>,
}

impl Generator {
    /// `start_ms`: event time of the first event; each next one is `step_ms` later.
    pub fn new(seed: u64, players: usize, start_ms: i64, step_ms: i64) -> Generator {
        Generator {
            rng: StdRng::seed_from_u64(seed),
            players: players.max(1),
            ts_ms: start_ms,
            step_ms,
            dup_ratio: 0.0,
            bad_ratio: 0.0,
            names: false,
            columns: false,
            last: None,
        }
    }

    pub fn with_duplicates(mut self, ratio: f64) -> Self {
        self.dup_ratio = ratio;
        self
    }

    pub fn with_bad_records(mut self, ratio: f64) -> Self {
        self.bad_ratio = ratio;
        self
    }

    /// Events carry the player's display name as `meta`.
    pub fn with_names(mut self) -> Self {
        self.names = true;
        self
    }

    /// Matches carry `scores`, for a board ranked by wins, then kills.
    pub fn with_columns(mut self) -> Self {
        self.columns = true;
        self
    }

    fn uuid(&mut self) -> uuid::Uuid {
        uuid::Builder::from_random_bytes(self.rng.random()).into_uuid()
    }

    pub fn next_sample(&mut self) -> Sample {
        if let Some(last) = &self.last {
            if self.rng.random_bool(self.dup_ratio) {
                return Sample { key: last.key.clone(), value: last.value.clone() };
            }
        }
        let player = format!("player-{:05}", self.rng.random_range(0..self.players));
        if self.rng.random_bool(self.bad_ratio) {
            let value = match self.rng.random_range(0..3) {
                0 => b"{not json".to_vec(),
                1 => json!({"event_id": "nope", "type": "match_finished", "player_id": player, "score": 1, "ts": self.ts_ms}).to_string().into_bytes(),
                _ => json!({"event_id": self.uuid().to_string(), "type": "match_finished", "player_id": player, "score": 1.5, "ts": self.ts_ms})
                    .to_string()
                    .into_bytes(),
            };
            return Sample { key: player, value };
        }
        self.ts_ms += self.step_ms;
        let id = self.uuid().to_string();
        let mut value = if self.rng.random_bool(0.7) {
            let score: i64 = self.rng.random_range(-20..200);
            let mut v = json!({"event_id": id, "type": "match_finished", "player_id": player, "score": score, "ts": self.ts_ms});
            if self.columns {
                // A match won at 100 points or more, and the kills it took (no draw of its own: the stream is the same).
                v["scores"] = json!({ "wins": i64::from(score >= 100), "kills": score.max(0) / 10 });
            }
            v
        } else {
            let track = TRACKS[self.rng.random_range(0..TRACKS.len())];
            let ms: i64 = self.rng.random_range(60_000..120_000);
            json!({"event_id": id, "type": "lap_time", "player_id": player, "score": ms, "ts": self.ts_ms, "attrs": {"track": track}})
        };
        if self.names {
            let n: u32 = player.trim_start_matches("player-").parse().unwrap_or(0);
            value["meta"] = json!({ "name": format!("{} {}", NAMES[n as usize % NAMES.len()], n) });
        }
        let s = Sample { key: player, value: value.to_string().into_bytes() };
        self.last = Some(Sample { key: s.key.clone(), value: s.value.clone() });
        s
    }
}

/// How the sample producer writes a record: as its topic's format says.
pub enum Encoding {
    Json,
    /// Framed with this schema id.
    Avro(u32, apache_avro::Schema),
    /// The schema's first message, framed with this schema id.
    Protobuf(u32, prost_reflect::MessageDescriptor),
}

impl Encoding {
    /// The encoding of `topic`: for Avro and Protobuf, the config's first
    /// schema of that kind (`[kafka.schemas]`), which should be rankflow's
    /// event (`schemas/event.avsc`, `schemas/event.proto`).
    pub fn for_topic(settings: &Settings, topic: &str) -> Result<Encoding, String> {
        let format = settings.kafka.format(topic);
        let found = |kind: Kind| settings.kafka.schemas.iter().find(|(_, s)| s.kind() == kind);
        let missing = || {
            format!("the sample producer writes {topic}'s records with a schema of [kafka.schemas], and it has none of that kind")
        };
        Ok(match format {
            Format::Json | Format::CloudEvents => Encoding::Json,
            Format::Avro => match found(Kind::Avro).map(|(id, s)| (*id, &**s)) {
                Some((id, Schema::Avro(schema, ..))) => Encoding::Avro(id, schema.clone()),
                _ => return Err(missing()),
            },
            Format::Protobuf => match found(Kind::Protobuf).map(|(id, s)| (*id, &**s)) {
                Some((id, Schema::Protobuf(file, _))) => {
                    Encoding::Protobuf(id, file.messages().next().ok_or_else(missing)?)
                }
                _ => return Err(missing()),
            },
        })
    }

    /// A sample's JSON value in this encoding; one that does not fit the
    /// schema (a bad sample) is sent as it is, to be dead-lettered.
    pub fn encode(&self, json: &[u8]) -> Vec<u8> {
        let encoded = match self {
            Encoding::Json => None,
            Encoding::Avro(id, schema) => serde_json::from_slice::<serde_json::Value>(json).ok().and_then(|mut v| {
                for field in ["attrs", "meta", "scores"] {
                    if v.get(field).is_none() {
                        v[field] = json!({});
                    }
                }
                let value = apache_avro::to_value(v).ok()?.resolve(schema).ok()?;
                Some(wire::frame(*id, None, &apache_avro::to_avro_datum(schema, value).ok()?))
            }),
            Encoding::Protobuf(id, message) => serde_json::from_slice::<serde_json::Value>(json).ok().and_then(|v| {
                let m = prost_reflect::DynamicMessage::deserialize(message.clone(), v).ok()?;
                Some(wire::frame(*id, Some(&[0]), &prost::Message::encode_to_vec(&m)))
            }),
        };
        encoded.unwrap_or_else(|| json.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_stream() {
        let mut a = Generator::new(7, 100, 0, 10).with_duplicates(0.1).with_bad_records(0.1);
        let mut b = Generator::new(7, 100, 0, 10).with_duplicates(0.1).with_bad_records(0.1);
        for _ in 0..100 {
            assert_eq!(a.next_sample().value, b.next_sample().value);
        }
    }

    #[test]
    fn samples_encoded_as_avro_or_protobuf_decode_to_the_same_events() {
        use crate::event::fields::FieldMap;
        use crate::event::{decode, Found, Parsed};
        let avro = Schema::avro(crate::event::schema::EVENT_AVSC).unwrap();
        let proto = Schema::proto(crate::event::schema::EVENT_PROTO).unwrap();
        let (Schema::Avro(a, ..), Schema::Protobuf(p, _)) = (avro.clone(), proto.clone()) else { panic!() };
        let encodings = [
            (Format::Avro, Encoding::Avro(1, a)),
            (Format::Protobuf, Encoding::Protobuf(2, p.messages().next().unwrap())),
        ];
        let schemas = [std::sync::Arc::new(avro), std::sync::Arc::new(proto)];
        let lookup = |id: u32| Found::Schema(schemas[id as usize - 1].clone());
        let mut g = Generator::new(3, 10, 1_786_000_000_000, 10).with_names().with_bad_records(0.2);
        for _ in 0..200 {
            let s = g.next_sample();
            let json = crate::event::parse(&s.value, Default::default(), |_| true);
            for (format, encoding) in &encodings {
                let value = encoding.encode(&s.value);
                let got =
                    decode(*format, &value, &[], &lookup, &FieldMap::default(), Default::default(), |_| true).unwrap();
                match (&json, got) {
                    (Parsed::Event(a), Parsed::Event(b)) => assert_eq!(
                        (a.event_id, &a.player_id, a.score, a.ts_ms, &a.attrs, &a.meta),
                        (b.event_id, &b.player_id, b.score, b.ts_ms, &b.attrs, &b.meta)
                    ),
                    (Parsed::Rejected(_), Parsed::Rejected(_)) => {}
                    (a, b) => panic!("{format:?}: {a:?} vs {b:?}"),
                }
            }
        }
    }

    #[test]
    fn good_samples_parse_as_events() {
        let mut g = Generator::new(1, 10, 1_786_000_000_000, 10);
        for _ in 0..50 {
            let s = g.next_sample();
            let parsed = crate::event::parse(&s.value, Default::default(), |_| true);
            assert!(matches!(parsed, crate::event::Parsed::Event(_)), "{}", String::from_utf8_lossy(&s.value));
        }
        let mut g = Generator::new(1, 10, 1_786_000_000_000, 10).with_names();
        for _ in 0..50 {
            let parsed = crate::event::parse(&g.next_sample().value, Default::default(), |_| true);
            assert!(
                matches!(parsed, crate::event::Parsed::Event(e) if e.meta.as_deref().is_some_and(|m| m.contains("name")))
            );
        }
    }
}
