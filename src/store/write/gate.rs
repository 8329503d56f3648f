//! How a worker's apply calls are let into Redis: in order, and at most
//! [`CALLS_IN_REDIS`] sent and unanswered per Redis node at a time.
//!
//! One call running and one waiting in the node's input buffer keep that
//! node busy (Redis reads all a client has sent at once, so calls sent
//! together would run back to back, however small each is). The waiting
//! one is sent [`LEAD`] before the running one is expected to end: Redis
//! takes ready sockets in the order their data came, so a read from another
//! client that arrived meanwhile runs first, and waits for what is left of
//! the running call, not for two. On a cluster each primary has
//! its own allowance, so one worker keeps every primary its batches reach
//! busy at once. Which primary serves a call comes from `CLUSTER SLOTS`,
//! read again every [`MAP_MAX_AGE`]: a map gone stale (a failover, a
//! resharding) only lets a node take more calls, or fewer, for a while;
//! which node a call reaches is redis-rs's routing, and the order of a tag's
//! calls does not depend on the map (a tag's calls share one slot, so one
//! lane, and the scripts' preconditions hold them in order whatever reaches
//! Redis first).

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use redis::Value;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant as TokioInstant;

/// Apply calls one worker has sent a Redis node and not had answered, at most.
pub(in crate::store) const CALLS_IN_REDIS: usize = 2;

/// How long before a node's running call is expected to end the call
/// behind it is sent (see [`start_in_order`]).
const LEAD: Duration = Duration::from_millis(1);

/// How long a cluster's slot map is used before it is read again.
const MAP_MAX_AGE: Duration = Duration::from_secs(10);

/// Which primary serves each hash slot: `(first, last, node)`, from `CLUSTER SLOTS`.
#[derive(Debug, Default, PartialEq)]
pub(in crate::store) struct SlotMap(Vec<(u16, u16, String)>);

impl SlotMap {
    /// Reads a `CLUSTER SLOTS` reply: per range, its first and last slot,
    /// then the primary as `[host, port, ...]`, then its replicas. `None`
    /// for a reply of another shape.
    pub(in crate::store) fn parse(reply: &Value) -> Option<SlotMap> {
        let Value::Array(ranges) = reply else { return None };
        let mut out = Vec::with_capacity(ranges.len());
        for range in ranges {
            let Value::Array(r) = range else { return None };
            let (Some(Value::Int(first)), Some(Value::Int(last)), Some(Value::Array(primary))) =
                (r.first(), r.get(1), r.get(2))
            else {
                return None;
            };
            let host = match primary.first() {
                Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
                Some(Value::SimpleString(s)) => s.clone(),
                _ => return None,
            };
            let Some(Value::Int(port)) = primary.get(1) else { return None };
            out.push((u16::try_from(*first).ok()?, u16::try_from(*last).ok()?, format!("{host}:{port}")));
        }
        out.sort();
        Some(SlotMap(out))
    }

    /// The node serving `slot`, if the map covers it.
    fn node_of(&self, slot: u16) -> Option<&str> {
        let at = self.0.partition_point(|(first, _, _)| *first <= slot).checked_sub(1)?;
        let (_, last, node) = &self.0[at];
        (slot <= *last).then_some(node.as_str())
    }
}

/// Orders apply calls across batches and bounds those in each node.
pub(in crate::store) struct Gate {
    /// Held while a batch's calls are started, so batches reach Redis in order.
    pub(in crate::store) order: tokio::sync::Mutex<()>,
    lanes: Mutex<Lanes>,
}

struct Lanes {
    /// A cluster's slot map, once read; without one every call shares one
    /// lane (a single Redis, or a cluster whose map could not be read).
    map: Option<SlotMap>,
    read_at: Option<Instant>,
    /// Each node's lane, by node (`""`: the one lane without a map).
    nodes: HashMap<String, Arc<Lane>>,
}

impl Gate {
    pub(in crate::store) fn new() -> Gate {
        Gate {
            order: tokio::sync::Mutex::new(()),
            lanes: Mutex::new(Lanes { map: None, read_at: None, nodes: HashMap::new() }),
        }
    }

    fn lanes(&self) -> std::sync::MutexGuard<'_, Lanes> {
        self.lanes.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether the slot map is due to be read (again).
    pub(in crate::store) fn map_due(&self) -> bool {
        self.lanes().read_at.is_none_or(|at| at.elapsed() >= MAP_MAX_AGE)
    }

    /// Records a reading of the slot map; a failed one (`None`) keeps the
    /// map there was, and is tried again only after [`MAP_MAX_AGE`].
    pub(in crate::store) fn set_map(&self, map: Option<SlotMap>) {
        let mut lanes = self.lanes();
        lanes.read_at = Some(Instant::now());
        if let Some(map) = map {
            lanes.map = Some(map);
        }
    }

    /// The lane of each call, by its slot, and those lanes:
    /// `(lane of each call, lanes)`.
    pub(in crate::store) fn assign(&self, slots: impl IntoIterator<Item = u16>) -> (Vec<usize>, Vec<Arc<Lane>>) {
        let mut lanes = self.lanes();
        let Lanes { map, nodes, .. } = &mut *lanes;
        let mut names: Vec<String> = Vec::new();
        let of_calls = slots
            .into_iter()
            .map(|slot| {
                let node = map.as_ref().and_then(|m| m.node_of(slot)).unwrap_or("");
                names.iter().position(|n| n == node).unwrap_or_else(|| {
                    names.push(node.to_string());
                    names.len() - 1
                })
            })
            .collect();
        let gates =
            names.iter().map(|n| nodes.entry(n.clone()).or_insert_with(|| Arc::new(Lane::new())).clone()).collect();
        (of_calls, gates)
    }
}

/// One node's lane: its places, and the calls it is running.
pub(in crate::store) struct Lane {
    places: Arc<Semaphore>,
    running: Mutex<Running>,
    /// Told whenever one of the lane's calls is answered.
    answered: Notify,
}

#[derive(Default)]
struct Running {
    /// The calls sent and not answered, oldest first: each one's ticket,
    /// and how long it is expected to hold Redis.
    calls: VecDeque<(u64, Duration)>,
    /// When the oldest began to run, as far as the worker can tell: when it
    /// was sent, or when the call before it was answered.
    since: Option<TokioInstant>,
    tickets: u64,
}

impl Lane {
    pub(in crate::store) fn new() -> Lane {
        Lane { places: Arc::new(Semaphore::new(CALLS_IN_REDIS)), running: Mutex::default(), answered: Notify::new() }
    }

    fn running(&self) -> std::sync::MutexGuard<'_, Running> {
        self.running.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// When the lane's next call is to be sent, if not now: [`LEAD`] before
    /// the call that runs is expected to end.
    fn not_before(&self) -> Option<TokioInstant> {
        let running = self.running();
        let (&(_, expected), since) = (running.calls.front()?, running.since?);
        let at = (since + expected).checked_sub(LEAD)?;
        (at > TokioInstant::now()).then_some(at)
    }

    /// Records a call sent, expected to hold Redis `expected`; the call is
    /// answered when what this returns is dropped.
    fn sent(lane: &Arc<Lane>, expected: Duration, place: OwnedSemaphorePermit) -> Sent {
        let mut running = lane.running();
        if running.calls.is_empty() {
            running.since = Some(TokioInstant::now());
        }
        running.tickets += 1;
        let ticket = running.tickets;
        running.calls.push_back((ticket, expected));
        Sent { lane: lane.clone(), ticket, _place: place }
    }
}

/// A call sent in its lane: when dropped (the call answered, or given up),
/// the lane is told, and its place is given back.
struct Sent {
    lane: Arc<Lane>,
    ticket: u64,
    _place: OwnedSemaphorePermit,
}

impl Drop for Sent {
    fn drop(&mut self) {
        {
            let mut running = self.lane.running();
            if let Some(at) = running.calls.iter().position(|(t, _)| *t == self.ticket) {
                running.calls.remove(at);
                if at == 0 {
                    // The next call, already in Redis, runs from now.
                    running.since = Some(TokioInstant::now());
                }
            }
        }
        self.lane.answered.notify_waiters();
    }
}

/// Starts calls `order` (each `(call, lane, how long it is expected to
/// hold Redis)`), each once its lane has a free place, in order within each
/// lane, a lane not waiting for another: `start(call)` makes the call's
/// future, which is polled at once, so that it is queued on the connection
/// behind the one before it in its lane. A call sent while another runs in
/// its lane waits until [`LEAD`] before that one is expected to end (or has
/// ended): it is still queued in time to keep the node busy, and a read
/// that arrived meanwhile runs before it.
/// Answers `(call, output)` for the calls that finished meanwhile, and
/// those still running, to be awaited (their places are freed as each ends).
pub(in crate::store) async fn start_in_order<T, F: Future<Output = T>>(
    order: &[(usize, usize, Duration)],
    lanes: &[Arc<Lane>],
    mut start: impl FnMut(usize) -> F,
) -> (Vec<(usize, T)>, FuturesUnordered<impl Future<Output = (usize, T)>>) {
    let mut queues: Vec<VecDeque<(usize, Duration)>> = vec![VecDeque::new(); lanes.len()];
    for &(call, lane, expected) in order {
        queues[lane].push_back((call, expected));
    }
    let mut running = FuturesUnordered::new();
    let mut done = Vec::new();
    // A place each lane holds for its next call, which waits for its time.
    let mut held: Vec<Option<OwnedSemaphorePermit>> = (0..lanes.len()).map(|_| None).collect();
    loop {
        for (l, queue) in queues.iter_mut().enumerate() {
            while let Some(&(call, expected)) = queue.front() {
                let Some(place) = held[l].take().or_else(|| lanes[l].places.clone().try_acquire_owned().ok()) else {
                    break;
                };
                if lanes[l].not_before().is_some() {
                    held[l] = Some(place);
                    break;
                }
                queue.pop_front();
                running.push(holding(call, start(call), Lane::sent(&lanes[l], expected, place)));
                // Polled now, the call is queued on the connection, behind the one before.
                while let Some(Some(a)) = running.next().now_or_never() {
                    done.push(a);
                }
            }
        }
        let waiting: Vec<usize> = (0..queues.len()).filter(|&l| !queues[l].is_empty()).collect();
        if waiting.is_empty() {
            return (done, running);
        }
        // Each waiting lane waits for a place, or holds one and waits for
        // its time; an answer frees a place, or a call of an earlier batch ends.
        let (timed, full): (Vec<usize>, Vec<usize>) = waiting.iter().partition(|&&l| held[l].is_some());
        let freed = async {
            if full.is_empty() {
                return futures::future::pending().await;
            }
            futures::future::select_all(full.iter().map(|&l| lanes[l].places.clone().acquire_owned().boxed())).await
        };
        tokio::select! {
            biased;
            Some(a) = running.next(), if !running.is_empty() => done.push(a),
            (place, at, _) = freed => held[full[at]] = Some(place.expect("the places are never closed")),
            () = until_due(timed.iter().map(|&l| &*lanes[l]).collect()) => {}
        }
    }
}

/// Until one of `lanes` may send its next call (see [`Lane::not_before`]);
/// never, for no lanes.
async fn until_due(lanes: Vec<&Lane>) {
    if lanes.is_empty() {
        return futures::future::pending().await;
    }
    loop {
        // Listening before looking: an answer in between is not missed.
        let mut answered: Vec<_> = lanes.iter().map(|l| Box::pin(l.answered.notified())).collect();
        for a in &mut answered {
            a.as_mut().enable();
        }
        let mut soonest: Option<TokioInstant> = None;
        for lane in &lanes {
            let Some(at) = lane.not_before() else { return };
            soonest = Some(soonest.map_or(at, |s| s.min(at)));
        }
        let at = soonest.expect("at least one lane");
        tokio::select! {
            _ = tokio::time::sleep_until(at) => return,
            _ = futures::future::select_all(answered) => {}
        }
    }
}

/// A call's future that tells its lane, and gives its place back, once it has ended.
async fn holding<T>(call: usize, call_future: impl Future<Output = T>, sent: Sent) -> (usize, T) {
    let out = call_future.await;
    drop(sent);
    (call, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::sync::oneshot;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_cluster_slots_reply_maps_each_slot_to_its_primary() {
        let range = |first: i64, last: i64, port: i64, replica: i64| {
            Value::Array(vec![
                Value::Int(first),
                Value::Int(last),
                Value::Array(vec![bulk("127.0.0.1"), Value::Int(port), bulk("id")]),
                Value::Array(vec![bulk("127.0.0.1"), Value::Int(replica), bulk("id2")]),
            ])
        };
        let reply = Value::Array(vec![
            range(10923, 16383, 7002, 7005),
            range(0, 5460, 7000, 7003),
            range(5461, 10922, 7001, 7004),
        ]);
        let map = SlotMap::parse(&reply).expect("a CLUSTER SLOTS reply");
        assert_eq!(map.node_of(0), Some("127.0.0.1:7000"));
        assert_eq!(map.node_of(5460), Some("127.0.0.1:7000"));
        assert_eq!(map.node_of(5461), Some("127.0.0.1:7001"));
        assert_eq!(map.node_of(16383), Some("127.0.0.1:7002"));
        // A slot no range covers (a resharding under way) has no node.
        let gap = SlotMap::parse(&Value::Array(vec![range(100, 200, 7000, 7003)])).unwrap();
        assert_eq!(gap.node_of(99), None);
        assert_eq!(gap.node_of(201), None);
        assert_eq!(SlotMap::parse(&Value::Int(1)), None);
        assert_eq!(SlotMap::parse(&Value::Array(vec![Value::Array(vec![Value::Int(0)])])), None);
    }

    #[test]
    fn calls_share_a_lane_per_node_and_one_lane_without_a_map() {
        let gate = Gate::new();
        let (lanes, gates) = gate.assign([1, 9000, 2]);
        assert_eq!((lanes, gates.len()), (vec![0, 0, 0], 1));
        let one = |first: i64, last: i64, port: i64| {
            Value::Array(vec![
                Value::Int(first),
                Value::Int(last),
                Value::Array(vec![bulk("h"), Value::Int(port), bulk("id")]),
            ])
        };
        gate.set_map(SlotMap::parse(&Value::Array(vec![one(0, 8191, 1), one(8192, 16383, 2)])));
        assert!(!gate.map_due());
        let (lanes, gates) = gate.assign([1, 9000, 2, 16000]);
        assert_eq!(lanes, [0, 1, 0, 1]);
        // A node keeps its allowance from batch to batch.
        let (_, again) = gate.assign([9000]);
        assert!(Arc::ptr_eq(&gates[1], &again[0]));
        // A failed reading keeps the map.
        gate.set_map(None);
        assert_eq!(gate.assign([1, 9000]).0, [0, 1]);
    }

    /// Calls that end when the test says: `start(call)` records the call and
    /// waits for its release.
    struct Held {
        started: Arc<Mutex<Vec<usize>>>,
        release: Mutex<HashMap<usize, oneshot::Sender<()>>>,
    }

    impl Held {
        fn new() -> Held {
            Held { started: Arc::new(Mutex::new(Vec::new())), release: Mutex::new(HashMap::new()) }
        }

        fn start(&self, call: usize) -> impl Future<Output = usize> {
            let (tx, rx) = oneshot::channel();
            self.release.lock().unwrap().insert(call, tx);
            self.started.lock().unwrap().push(call);
            async move {
                let _ = rx.await;
                call
            }
        }

        fn end(&self, call: usize) {
            self.release.lock().unwrap().remove(&call).expect("started").send(()).unwrap();
        }

        fn started(&self) -> Vec<usize> {
            self.started.lock().unwrap().clone()
        }
    }

    #[tokio::test]
    async fn every_call_is_polled_as_it_starts_so_it_is_queued_before_the_next_starts() {
        // redis-rs queues a command on its first poll (tests/ordering.rs): a
        // call polled as it starts is on the connection before the next starts,
        // whoever polls the calls afterwards.
        let gates: Vec<Arc<Lane>> = (0..2).map(|_| Arc::new(Lane::new())).collect();
        let polled = Arc::new(Mutex::new(Vec::new()));
        let order = [(0, 0), (1, 0), (2, 1)].map(|(c, l)| (c, l, Duration::ZERO));
        let p = polled.clone();
        let (done, running) = start_in_order(&order, &gates, move |c| {
            let p = p.clone();
            async move {
                p.lock().unwrap().push(c);
                futures::future::pending::<usize>().await
            }
        })
        .await;
        assert!(done.is_empty());
        assert_eq!(running.len(), 3, "the calls are left running, unanswered");
        assert_eq!(*polled.lock().unwrap(), [0, 1, 2], "each call polled as it started, in order");
    }

    // Paused time: a sleep ends only once every other task has done all
    // it can, so what the test sees does not depend on the machine's speed.
    #[tokio::test(start_paused = true)]
    async fn each_node_takes_two_calls_at_once_in_order_and_no_node_waits_for_another() {
        let gates: Vec<Arc<Lane>> = (0..3).map(|_| Arc::new(Lane::new())).collect();
        let held = Arc::new(Held::new());
        // Calls 0-2 and 6 to node 0, 3-4 to node 1, 5 to node 2; none
        // expected to take time, so none waits for the one before to end.
        let order = [(0, 0), (1, 0), (2, 0), (3, 1), (4, 1), (5, 2), (6, 0)].map(|(c, l)| (c, l, Duration::ZERO));
        let h = held.clone();
        let task = tokio::spawn(async move {
            let h2 = h.clone();
            let (mut done, mut running) = start_in_order(&order, &gates, move |c| h2.start(c)).await;
            while let Some(a) = running.next().await {
                done.push(a);
            }
            done
        });
        // Every node busy with two calls (one node had only one to take):
        // node 0's third call waits, and the calls behind it on other nodes do not.
        let wait_for = |n: usize| {
            let held = held.clone();
            async move {
                for _ in 0..500 {
                    if held.started().len() >= n {
                        return held.started();
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                held.started()
            }
        };
        assert_eq!(wait_for(5).await, [0, 1, 3, 4, 5]);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(held.started().len(), 5, "node 0 took a third call");
        // A node's place freed lets its next call in, in order.
        held.end(3);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(held.started().len(), 5, "a place on node 1 let a call of node 0 in");
        held.end(0);
        assert_eq!(wait_for(6).await, [0, 1, 3, 4, 5, 2]);
        held.end(1);
        assert_eq!(wait_for(7).await, [0, 1, 3, 4, 5, 2, 6]);
        for c in [2, 4, 5, 6] {
            held.end(c);
        }
        let mut done: Vec<usize> = task
            .await
            .unwrap()
            .into_iter()
            .map(|(c, out)| {
                assert_eq!(c, out);
                c
            })
            .collect();
        done.sort();
        assert_eq!(done, [0, 1, 2, 3, 4, 5, 6]);
    }

    // Paused time: a sleep ends only once every other task has done all
    // it can, so what the test sees does not depend on the machine's speed.
    #[tokio::test(start_paused = true)]
    async fn a_lane_full_of_an_earlier_batchs_calls_lets_the_next_batch_in_as_they_end() {
        let gate = Arc::new(Lane::new());
        let earlier: Vec<OwnedSemaphorePermit> =
            (0..CALLS_IN_REDIS).map(|_| gate.places.clone().try_acquire_owned().unwrap()).collect();
        let started = Arc::new(AtomicUsize::new(0));
        let s = started.clone();
        let gates = vec![gate.clone()];
        let task = tokio::spawn(async move {
            let (done, running) = start_in_order(&[(0, 0, Duration::ZERO)], &gates, move |c| {
                s.fetch_add(1, Ordering::SeqCst);
                async move { c }
            })
            .await;
            done.len() + running.count().await
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(started.load(Ordering::SeqCst), 0);
        drop(earlier);
        assert_eq!(task.await.unwrap(), 1);
        assert_eq!(started.load(Ordering::SeqCst), 1);
    }

    /// Starts `calls` (each expected to hold Redis `expected`) in one lane,
    /// as a batch does, on a task of its own.
    fn start_paced(
        held: &Arc<Held>,
        lane: &Arc<Lane>,
        calls: &[usize],
        expected: Duration,
    ) -> tokio::task::JoinHandle<()> {
        let (h, lanes) = (held.clone(), vec![lane.clone()]);
        let order: Vec<(usize, usize, Duration)> = calls.iter().map(|&c| (c, 0, expected)).collect();
        tokio::spawn(async move {
            let h2 = h.clone();
            let (_, mut running) = start_in_order(&order, &lanes, move |c| h2.start(c)).await;
            while running.next().await.is_some() {}
        })
    }

    #[tokio::test(start_paused = true)]
    async fn the_call_behind_a_running_one_is_sent_just_before_that_one_is_expected_to_end() {
        let (held, lane) = (Arc::new(Held::new()), Arc::new(Lane::new()));
        let task = start_paced(&held, &lane, &[0, 1], Duration::from_millis(100));
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(held.started(), [0], "the first call is sent at once");
        // A read that arrives meanwhile runs before the second call: it is not in Redis yet.
        tokio::time::sleep(Duration::from_millis(90)).await;
        assert_eq!(held.started(), [0]);
        // It is in Redis before the first is expected to end, to keep the node busy.
        tokio::time::sleep(Duration::from_millis(100) - LEAD - Duration::from_millis(90)).await;
        assert_eq!(held.started(), [0, 1]);
        held.end(0);
        held.end(1);
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_that_ends_early_lets_the_next_in_at_once_across_batches() {
        let (held, lane) = (Arc::new(Held::new()), Arc::new(Lane::new()));
        let first = start_paced(&held, &lane, &[0], Duration::from_millis(100));
        tokio::time::sleep(Duration::from_millis(1)).await;
        let second = start_paced(&held, &lane, &[1, 2], Duration::from_millis(100));
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(held.started(), [0], "the next batch's call waits for the running one's time");
        // Call 0 answers long before its time: call 1 goes at once, and
        // call 2 waits for call 1's time, measured from call 0's answer.
        held.end(0);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(held.started(), [0, 1]);
        tokio::time::sleep(Duration::from_millis(90)).await;
        assert_eq!(held.started(), [0, 1]);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(held.started(), [0, 1, 2]);
        held.end(1);
        held.end(2);
        first.await.unwrap();
        second.await.unwrap();
        // Every call answered: the lane is empty, and a call is sent at once.
        assert_eq!(lane.not_before(), None);
        assert!(lane.running().calls.is_empty());
    }
}
