//! `sched.lua`'s ops, typed: the scheduler's due jobs, their claims and the
//! partitions' watermarks, all under `<prefix>:{.sched}` (see the script's
//! header). Each op is one method taking its arguments and answering its
//! reply; a reply of another shape is a [`StoreError::Reply`].

use std::collections::HashMap;

use crate::keys;
use crate::store::conn::scripts::SCHED;
use crate::store::{touches, Store, StoreError};

/// A claimed job, and the token that finishes it (the claim's lapse time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    pub job: String,
    pub token: String,
}

fn bad(op: &str, got: String) -> StoreError {
    StoreError::Reply { script: "sched.lua", got: format!("{op}: {got}") }
}

/// `op` followed by `name, number` pairs.
fn pairs<'a>(op: &str, pairs: impl IntoIterator<Item = (&'a str, i64)>) -> Vec<String> {
    let mut args = vec![op.to_string()];
    for (name, n) in pairs {
        args.push(name.to_string());
        args.push(n.to_string());
    }
    args
}

/// `claim`'s reply: job, token, job, token, ...
fn claims(flat: Vec<String>) -> Result<Vec<Claim>, StoreError> {
    if !flat.len().is_multiple_of(2) {
        return Err(bad("claim", format!("{} values, not pairs", flat.len())));
    }
    Ok(flat.chunks_exact(2).map(|c| Claim { job: c[0].clone(), token: c[1].clone() }).collect())
}

impl Store {
    async fn sched<T: redis::FromRedisValue>(&self, prefix: &str, args: &[String]) -> Result<T, StoreError> {
        let (due, lease, wm) = keys::sched_keys(prefix);
        let keys = touches::named(&touches::SCHED, |name| match name {
            "due" => Some(due.clone()),
            "lease" => Some(lease.clone()),
            "watermarks" => Some(wm.clone()),
            _ => None,
        });
        let op = args.first().cloned().unwrap_or_default();
        let reply: redis::Value = self.script(&SCHED, &keys, args).await?;
        redis::from_redis_value(reply).map_err(|e| bad(&op, e.to_string()))
    }

    /// Adds each job (with its due time, ms) that is neither due nor
    /// claimed; answers how many were added.
    pub async fn sched_enqueue(&self, prefix: &str, jobs: &[(String, i64)]) -> Result<u64, StoreError> {
        self.sched(prefix, &pairs("enqueue", jobs.iter().map(|(j, at)| (j.as_str(), *at)))).await
    }

    /// Makes each job due by its time at the latest; answers how many moved or were added.
    pub async fn sched_advance(&self, prefix: &str, jobs: &[(String, i64)]) -> Result<u64, StoreError> {
        self.sched(prefix, &pairs("advance", jobs.iter().map(|(j, at)| (j.as_str(), *at)))).await
    }

    /// Gives lapsed claims back as due, then claims up to `most` due jobs for `lease_ms`.
    pub async fn sched_claim(&self, prefix: &str, lease_ms: u128, most: usize) -> Result<Vec<Claim>, StoreError> {
        claims(self.sched(prefix, &["claim".into(), lease_ms.to_string(), most.to_string()]).await?)
    }

    /// Ends a claim, the job due again at `next_due` ms (0: done); false if
    /// the claim had lapsed and was taken over.
    pub async fn sched_finish(&self, prefix: &str, claim: &Claim, next_due: i64) -> Result<bool, StoreError> {
        let args = ["finish".into(), claim.job.clone(), claim.token.clone(), next_due.to_string()];
        let n: i64 = self.sched(prefix, &args).await?;
        Ok(n == 1)
    }

    /// Raises each partition's watermark (record time, ms), never lowering one.
    pub async fn sched_watermarks(&self, prefix: &str, marks: &HashMap<String, i64>) -> Result<(), StoreError> {
        let _: i64 = self.sched(prefix, &pairs("watermark", marks.iter().map(|(f, ms)| (f.as_str(), *ms)))).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_come_in_pairs_or_are_refused() {
        let got = claims(vec!["seal:a".into(), "100".into()]).unwrap();
        assert_eq!(got, [Claim { job: "seal:a".into(), token: "100".into() }]);
        assert!(claims(vec!["seal:a".into()]).is_err());
        assert_eq!(pairs("enqueue", [("j", 5)]), ["enqueue", "j", "5"]);
    }
}
