//! CloudEvents: a CloudEvent's identity is its `source` and `id`, so the
//! event id rankflow dedupes on (when the data carries no `event_id`) is
//! the UUID v5, in the URL namespace, of `source + " " + id`: two sources'
//! ids never collide, a redelivery maps to the same id, and a consumer can
//! compute it too.

use uuid::Uuid;

/// The event id of the CloudEvent `id` from `source`.
pub fn event_id(source: &str, id: &str) -> Uuid {
    let mut name = String::with_capacity(source.len() + 1 + id.len());
    name.push_str(source);
    name.push(' ');
    name.push_str(id);
    Uuid::new_v5(&Uuid::NAMESPACE_URL, name.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_the_url_namespace_uuid_v5_of_source_space_id() {
        // Python: uuid.uuid5(uuid.NAMESPACE_URL, "https://game.example/matches 42")
        let want: Uuid = "bfa4e771-5c75-53dc-adf2-b53c67790e82".parse().unwrap();
        assert_eq!(event_id("https://game.example/matches", "42"), want);
        // Another source's id 42 is another event. (A source is a URI-reference,
        // which holds no space, so the space always ends it.)
        assert_ne!(event_id("https://game.example/laps", "42"), want);
        assert_ne!(event_id("https://game.example/matches", "43"), want);
    }
}
