//! `outbox.lua`'s ops, typed: the records scheduled jobs publish with
//! Kafka transactions (sealed tops, league results), kept in the order
//! they were decided until the outbox's publisher has committed them, all
//! under `<prefix>:{.outbox}` (see the script's header).

use serde::{Deserialize, Serialize};

use crate::keys;
use crate::store::conn::scripts::OUTBOX;
use crate::store::{touches, Store, StoreError};

/// One record of the outbox: where it goes and what it is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxRecord {
    /// Its `rankflow-output-id`: appended once however often its job runs.
    pub id: String,
    pub topic: String,
    pub key: String,
    pub payload: String,
}

/// How long an output id is remembered after it was appended: a job
/// taken over after a crash appends its records again within minutes.
const ID_TTL_SECS: u64 = 30 * 86_400;

fn bad(op: &str, got: String) -> StoreError {
    StoreError::Reply { script: "outbox.lua", got: format!("{op}: {got}") }
}

impl Store {
    async fn outbox<T: redis::FromRedisValue>(&self, prefix: &str, args: &[String]) -> Result<T, StoreError> {
        let (seq, items, lease, epoch, _) = keys::outbox_keys(prefix);
        let keys = touches::named(&touches::OUTBOX, |name| match name {
            "seq" => Some(seq.clone()),
            "items" => Some(items.clone()),
            "lease" => Some(lease.clone()),
            "epoch" => Some(epoch.clone()),
            _ => None,
        });
        let op = args.first().cloned().unwrap_or_default();
        let reply: redis::Value = self.script(&OUTBOX, &keys, args).await?;
        redis::from_redis_value(reply).map_err(|e| bad(&op, e.to_string()))
    }

    /// Appends each record whose id is not in the outbox yet; answers how many were.
    pub async fn outbox_append(&self, prefix: &str, records: &[OutboxRecord]) -> Result<u64, StoreError> {
        let ids = keys::outbox_keys(prefix).4;
        let mut args = vec!["append".to_string(), ids, ID_TTL_SECS.to_string()];
        for r in records {
            args.push(r.id.clone());
            args.push(serde_json::to_string(r).map_err(|e| bad("append", e.to_string()))?);
        }
        self.outbox(prefix, &args).await
    }

    /// The records from sequence number `first` on, up to `most`, in order.
    pub async fn outbox_read(
        &self,
        prefix: &str,
        first: u64,
        most: usize,
    ) -> Result<Vec<(u64, OutboxRecord)>, StoreError> {
        let flat: Vec<String> = self.outbox(prefix, &["read".into(), first.to_string(), most.to_string()]).await?;
        flat.chunks_exact(2)
            .map(|c| {
                let seq = c[0].parse().map_err(|_| bad("read", c[0].clone()))?;
                let record = serde_json::from_str(&c[1]).map_err(|e| bad("read", e.to_string()))?;
                Ok((seq, record))
            })
            .collect()
    }

    /// Deletes the records `first..end` (published).
    pub async fn outbox_trim(&self, prefix: &str, first: u64, end: u64) -> Result<u64, StoreError> {
        self.outbox(prefix, &["trim".into(), first.to_string(), end.to_string()]).await
    }

    /// Takes or renews the publisher's lease for `ms`; false if another holds it.
    pub async fn outbox_lease(&self, prefix: &str, name: &str, ms: u64) -> Result<bool, StoreError> {
        let got: i64 = self.outbox(prefix, &["lease".into(), name.into(), ms.to_string()]).await?;
        Ok(got == 1)
    }

    /// The outbox's name, made (from `fresh`) the first time it is asked.
    pub async fn outbox_epoch(&self, prefix: &str, fresh: &str) -> Result<String, StoreError> {
        self.outbox(prefix, &["epoch".into(), fresh.into()]).await
    }
}
