//! Creating the topics a config names (`rankflow create-topics`).

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::RDKafkaErrorCode;

use crate::config::Settings;

/// Creates the source and admin topics (with `partitions` each), the dead-letter
/// topic, the changes topic when one is set and, when a board seals its
/// periods, the sealed topic; a topic that already exists is left as it is.
pub async fn create_topics(settings: &Settings, partitions: i32) -> Result<(), String> {
    super::connect::before_command(&settings.kafka).await?;
    let admin: AdminClient<DefaultClientContext> =
        super::client::admin(&settings.kafka).create().map_err(|e| format!("cannot create admin client: {e}"))?;
    let mut names: Vec<&str> = settings.kafka.topics.iter().map(String::as_str).collect();
    names.extend(settings.kafka.admin_topics.iter().map(String::as_str));
    names.push(&settings.kafka.dead_letter_topic);
    names.extend(settings.kafka.changes_topic.as_deref());
    names.extend(settings.kafka.review_topic.as_deref());
    if settings.seals() {
        names.push(&settings.sealing.topic);
    }
    let topics: Vec<NewTopic<'_>> =
        names.iter().map(|n| NewTopic::new(n, partitions, TopicReplication::Fixed(1))).collect();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let results = admin.create_topics(&topics, &opts).await.map_err(|e| format!("create topics: {e}"))?;
    for r in results {
        match r {
            Ok(name) => println!("created topic {name}"),
            Err((name, RDKafkaErrorCode::TopicAlreadyExists)) => println!("topic {name} already exists"),
            Err((name, code)) => return Err(format!("cannot create topic {name}: {code}")),
        }
    }
    Ok(())
}
