//! `rankflow-tools bench formats`: what reading Avro and Protobuf costs the
//! worker, against JSON. The same generated events (1% bad records, 2%
//! producer duplicates) are produced to three topics: as JSON, and as Avro
//! and Protobuf with rankflow's own schemas in the Schema Registry wire
//! format (`schemas/event.avsc`, `schemas/event.proto`, given to the worker
//! in `[kafka.schemas]`). Then, round after round, the real binary drains
//! each topic in turn under a fresh group on a flushed Redis, so the three
//! meet the same host in the same minutes. Reported per format: the drain
//! rate and the worker's CPU per record, and their ratios to JSON (target:
//! no more worker CPU per record than JSON).

use rankflow::event::schema::{Schema, EVENT_AVSC, EVENT_PROTO};

use super::*;

pub async fn formats(brokers: &str, redis_url: &str, count: u64, partitions: i32, rounds: usize) -> Result<(), String> {
    let exe = rankflow_bin()?;
    let dir = tempfile_dir()?;
    let avsc = dir.join("event.avsc");
    let proto = dir.join("event.proto");
    std::fs::write(&avsc, EVENT_AVSC).map_err(|e| e.to_string())?;
    std::fs::write(&proto, EVENT_PROTO).map_err(|e| e.to_string())?;
    let Schema::Avro(avro, ..) = Schema::avro(EVENT_AVSC)? else { unreachable!("an Avro schema") };
    let Schema::Protobuf(file, _) = Schema::proto(EVENT_PROTO)? else { unreachable!("a Protobuf schema") };
    let message = file.messages().next().ok_or("event.proto has no message")?;
    let run = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let sides: [(&str, &'static str, Encoding); 3] = [
        ("json", "drain, JSON", Encoding::Json),
        ("avro", "drain, Avro", Encoding::Avro(1, avro)),
        ("protobuf", "drain, Protobuf", Encoding::Protobuf(2, message)),
    ];
    let stream = Stream { bad_ratio: 0.01, dup_ratio: 0.02 };
    let decode_us = decode_alone(&sides, count.min(100_000))?;
    let mut topics = Vec::new();
    for (format, _, encoding) in &sides {
        let topic = format!("bench-{format}-{run}");
        create_topic(brokers, &topic, partitions).await?;
        eprintln!("bench: producing {count} records to {topic} as {format} ({})", stream.describe());
        produce_as(brokers, &topic, (count, 7, 0), stream, encoding).await?;
        topics.push(topic);
    }
    let conn = open_store(&bench_config(brokers, redis_url, &topics[0], "unused", "127.0.0.1:0", "")).await?.1;
    let (mut rates, mut cpu) = (vec![Vec::new(); 3], vec![Vec::new(); 3]);
    for round in 1..=rounds.max(1) {
        for (i, (format, _, _)) in sides.iter().enumerate() {
            eprintln!("bench: the rankflow binary drains the {format} topic (round {round} of {rounds})");
            flush(&conn).await?;
            let group = format!("bench-formats-{run}-{format}-{round}");
            let listen = format!("127.0.0.1:{}", free_port()?);
            let topic = &topics[i];
            let kafka = format!(
                "formats = {{ \"{topic}\" = \"{format}\" }}\nschemas = {{ \"1\" = \"{}\", \"2\" = \"{}\" }}\n[kafka.options]\n",
                avsc.display(),
                proto.display()
            );
            let cfg = bench_config(brokers, redis_url, topic, &group, &listen, "").replace("[kafka.options]\n", &kafka);
            let at = GroupTopic { brokers, group: &group, topic, partitions };
            let drained = run_to_end(&exe, &dir, &cfg, &listen, redis_url, &at, count)?;
            rates[i].push(rate(count, drained.drain));
            cpu[i].push(drained.cpu * 1e6 / count as f64);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let mut rows = Vec::new();
    for (i, (_, what, _)) in sides.iter().enumerate() {
        let (rate_ratio, each) = round_ratios(&rates[i], &rates[0]);
        let (cpu_ratio, cpu_each) = round_ratios(&cpu[i], &cpu[0]);
        let decode = format!("decoding and checking alone {:.2} µs/record", decode_us[i]);
        let note = if i == 0 {
            format!("1.00x; worker CPU {:.1} µs/record; {decode}", median(&cpu[0]))
        } else {
            format!(
                "{rate_ratio:.2}x JSON's rate{each}; worker CPU {:.1} µs/record, {cpu_ratio:.2}x JSON's{cpu_each} (target <= 1.00x); {decode}",
                median(&cpu[i])
            )
        };
        rows.push(Row { what, per_sec: median(&rates[i]), note });
    }
    print_table(&rows);
    println!(
        "\nthe same {count} records ({}) as JSON, Avro and Protobuf; {partitions} partitions; rounds alternated",
        stream.describe()
    );
    println!(
        "{}",
        json!({"json": rows[0].per_sec, "avro": rows[1].per_sec, "protobuf": rows[2].per_sec,
        "cpu_us": {"json": median(&cpu[0]), "avro": median(&cpu[1]), "protobuf": median(&cpu[2])}})
    );
    Ok(())
}

/// The CPU of decoding and checking alone, in this process: the same
/// generated values in each encoding through `event::decode`, µs per record
/// (best of 5 passes).
fn decode_alone(sides: &[(&str, &'static str, Encoding); 3], count: u64) -> Result<Vec<f64>, String> {
    use rankflow::event::fields::FieldMap;
    use rankflow::event::{decode, Format, Found};
    let schemas = [Arc::new(Schema::avro(EVENT_AVSC)?), Arc::new(Schema::proto(EVENT_PROTO)?)];
    let lookup = |id: u32| Found::Schema(schemas[id as usize - 1].clone());
    let mut g = Generator::new(7, 100_000, chrono::Utc::now().timestamp_millis(), 0).with_bad_records(0.01);
    let samples: Vec<Vec<u8>> = (0..count).map(|_| g.next_sample().value).collect();
    let mut out = Vec::new();
    for (format, _, encoding) in sides {
        let format = Format::parse(format).ok_or("a format")?;
        let values: Vec<Vec<u8>> = samples.iter().map(|v| encoding.encode(v)).collect();
        let fields = FieldMap::default();
        let mut best = f64::MAX;
        for _ in 0..5 {
            let started = Instant::now();
            let mut events = 0usize;
            for v in &values {
                let parsed = decode(format, v, &[], &lookup, &fields, Default::default(), |_| true);
                events += usize::from(matches!(parsed, Ok(event::Parsed::Event(_))));
            }
            std::hint::black_box(events);
            best = best.min(started.elapsed().as_secs_f64() * 1e6 / values.len() as f64);
        }
        out.push(best);
    }
    Ok(out)
}
