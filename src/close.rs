//! `rankflow close` (also `rankflow admin close`): a period closed on
//! demand, before its time. Records produced from then on are refused
//! `period_closed` there, and the period is sealed (and its top published)
//! once every partition has been applied past the close, as at a timed
//! close. Only for boards that seal (`close_after`).

use std::time::{Duration, Instant};

use crate::board::Router;
use crate::config::Settings;
use crate::keys;
use crate::period::PeriodError;
use crate::schedule::JobError;
use crate::store::{Store, StoreError};

/// Why a period could not be closed, or was not sealed in time.
#[derive(Debug, thiserror::Error)]
pub enum CloseError {
    #[error(transparent)]
    Redis(#[from] StoreError),
    #[error("board '{0}' is not a configured board")]
    UnknownBoard(String),
    #[error("board '{0}' does not seal its periods (no close_after): there is nothing to close")]
    NotSealing(String),
    #[error("board '{board}' is split by '{attr}': name a split")]
    NeedsSplit { board: String, attr: String },
    #[error("board '{0}' has no splits")]
    NoSplits(String),
    #[error("'{0}' is not a split value")]
    BadSplit(String),
    #[error(transparent)]
    Period(#[from] PeriodError),
    #[error("all_time never closes")]
    AllTimeNeverCloses,
    #[error(transparent)]
    Job(#[from] JobError),
    #[error("{key} was not sealed within {timeout:?}: is a worker running, and have all partitions been applied past the close?")]
    NotSealed { key: String, timeout: Duration },
}

/// `rankflow close`: closes a period now. Records produced from now
/// on are refused `period_closed` there, and the period is sealed (and its
/// top published) once every partition has been applied past now, as at a
/// timed close. Only for boards that seal (`close_after`). With `wait`,
/// returns once it is sealed.
pub async fn close(
    settings: &Settings,
    board_id: &str,
    split: Option<&str>,
    period_id: &str,
    wait: Option<Duration>,
) -> Result<(), CloseError> {
    let router = Router::new(settings.boards.clone(), &settings.redis.key_prefix);
    let board = router.board(board_id).ok_or_else(|| CloseError::UnknownBoard(board_id.into()))?;
    if board.close_after().is_none() {
        return Err(CloseError::NotSealing(board_id.into()));
    }
    match (board.split_by(), split) {
        (Some(attr), None) => return Err(CloseError::NeedsSplit { board: board_id.into(), attr: attr.into() }),
        (None, Some(_)) => return Err(CloseError::NoSplits(board_id.into())),
        (_, Some(s)) if !crate::event::valid_split_value(s) => return Err(CloseError::BadSplit(s.into())),
        _ => {}
    }
    let period = board.period_by_id(period_id)?;
    if period.end_ms.is_none() {
        return Err(CloseError::AllTimeNeverCloses);
    }
    let base = keys::base(router.prefix(), board_id, split);
    let key = keys::period_key(&base, &period.id);
    let store = Store::connect(&settings.redis).await?;
    let now = chrono::Utc::now().timestamp_millis();
    // The first close on demand stands; a timed close that comes first still counts (seal.rs takes the earlier).
    // Every shard of a sharded board refuses what is produced from now on.
    let bases = router.read_bases(board, split);
    store.close_on_demand(&bases, &period.id, now).await?;
    // Sealed once its last shard is (a job seals the shards in order).
    let last = bases.last().expect("a board has a tag");
    let job = crate::schedule::Job::Seal { base: base.clone(), period: period.id.clone() }.encode();
    crate::schedule::advance(&store, router.prefix(), &[(job, now)]).await?;
    println!("closing {key}");
    let Some(timeout) = wait else {
        return Ok(());
    };
    let deadline = Instant::now() + timeout;
    loop {
        if store.is_sealed(last, &period.id).await? {
            println!("sealed");
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(CloseError::NotSealed { key, timeout });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
