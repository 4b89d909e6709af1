//! Leader election against a real API server (kubesim): candidates with their own
//! clients race for one Lease; exactly one works at any sampled instant, a stopped or
//! crashed leader is replaced, and a leader that cannot renew steps down in time.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use causeway_runtime::leader::{Elector, Status, Timings};
use futures::TryStreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, WatchEvent, WatchParams};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const NS: &str = "causeway-system";
const LEASE: &str = "leader-test";

fn timings() -> Timings {
    Timings {
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(300),
    }
}

/// Some slack for a loaded test machine.
const SLACK: Duration = Duration::from_secs(2);

async fn client(server: &kubesim::Server, token: &str) -> kube::Client {
    let yaml = kubesim::kubeconfig::single(server.name(), &server.url(), server.ca_pem(), token);
    let kc = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(cfg).unwrap()
}

/// When (by the wall clock, as the Lease's renewTime) a leader's work saw its token
/// cancelled, and when the work ended.
#[derive(Default)]
struct Ends {
    cancelled: Mutex<Option<Timestamp>>,
    ended: Mutex<Option<Timestamp>>,
}

/// Clears a flag when dropped: the work is over however it ended (returned or aborted).
struct Working(Arc<AtomicBool>, Arc<Ends>);
impl Drop for Working {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
        *self.1.ended.lock().unwrap() = Some(Timestamp::now());
    }
}

/// What a leader's work does once its token is cancelled.
#[derive(Clone, Copy, PartialEq)]
enum Work {
    /// Returns at once.
    Stops,
    /// Goes on until it is dropped.
    IgnoresCancel,
}

/// One replica: an elector whose work raises `working` until its token is cancelled.
struct Candidate {
    id: String,
    status: watch::Receiver<Status>,
    working: Arc<AtomicBool>,
    ends: Arc<Ends>,
    stop: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
}

fn start(client: kube::Client, id: &str) -> Candidate {
    start_with(client, id, timings(), Work::Stops)
}

fn start_with(client: kube::Client, id: &str, timings: Timings, work: Work) -> Candidate {
    let elector = Elector::new(client, NS, LEASE, id, timings).unwrap();
    let working = Arc::new(AtomicBool::new(false));
    let ends = Arc::new(Ends::default());
    let stop = CancellationToken::new();
    let (w, e, s) = (working.clone(), ends.clone(), stop.clone());
    let status = elector.status();
    let task = tokio::spawn(async move {
        elector
            .run(&s, |lead| async move {
                w.store(true, Ordering::SeqCst);
                let _guard = Working(w, e.clone());
                lead.cancelled().await;
                *e.cancelled.lock().unwrap() = Some(Timestamp::now());
                if work == Work::IgnoresCancel {
                    std::future::pending::<()>().await;
                }
                Ok(())
            })
            .await
    });
    Candidate {
        id: id.into(),
        status,
        working,
        ends,
        stop,
        task,
    }
}

/// Whether a candidate works or says it leads (a crashed one says nothing any more).
fn leads(working: &AtomicBool, status: &watch::Receiver<Status>) -> bool {
    working.load(Ordering::SeqCst) || (status.has_changed().is_ok() && status.borrow().leading)
}

impl Candidate {
    fn leading(&self) -> bool {
        leads(&self.working, &self.status)
    }
}

/// Samples every 5 ms (for at most 2 minutes) how many candidates work or say they
/// lead; the count of instants where more than one did.
fn sample(
    flags: Vec<(Arc<AtomicBool>, watch::Receiver<Status>)>,
) -> (Arc<AtomicUsize>, CancellationToken) {
    let both = Arc::new(AtomicUsize::new(0));
    let done = CancellationToken::new();
    let (b, d) = (both.clone(), done.clone());
    tokio::spawn(async move {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !d.is_cancelled() && Instant::now() < deadline {
            let n = flags.iter().filter(|(w, s)| leads(w, s)).count();
            if n > 1 {
                b.fetch_add(1, Ordering::SeqCst);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    (both, done)
}

/// Polls `cond` every 20 ms until it holds or `within` passed; the time it took.
async fn until(what: &str, within: Duration, mut cond: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !cond() {
        assert!(started.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    started.elapsed()
}

async fn lease(c: &kube::Client) -> Lease {
    Api::<Lease>::namespaced(c.clone(), NS)
        .get(LEASE)
        .await
        .unwrap()
}

/// Watches the Lease from now on; the specs it goes through until `holder` holds it.
async fn lease_history(c: &kube::Client, holder: &str) -> JoinHandle<Vec<LeaseSpec>> {
    let api = Api::<Lease>::namespaced(c.clone(), NS);
    let rv = api
        .get(LEASE)
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let stream = api
        .watch(&WatchParams::default().timeout(60), &rv)
        .await
        .unwrap();
    let holder = holder.to_string();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        let mut seen = Vec::new();
        while let Some(event) = stream.try_next().await.unwrap() {
            let WatchEvent::Modified(l) = event else {
                continue;
            };
            if l.metadata.name.as_deref() != Some(LEASE) {
                continue;
            }
            let spec = l.spec.unwrap();
            let done = spec.holder_identity.as_deref() == Some(holder.as_str());
            seen.push(spec);
            if done {
                break;
            }
        }
        seen
    })
}

async fn renew_time(c: &kube::Client) -> Timestamp {
    lease(c).await.spec.unwrap().renew_time.unwrap().0
}

async fn cluster() -> kubesim::Server {
    kubesim::Server::start(kubesim::Config::new("leader"))
        .await
        .unwrap()
}

/// A candidate alone with the Lease, once it leads.
async fn sole_leader(client: kube::Client, id: &str) -> Candidate {
    let c = start(client, id);
    until("the first candidate leads", Duration::from_secs(10), || {
        c.leading()
    })
    .await;
    c
}

/// Waits until `c` steps down within the renew deadline; what its `run` returned.
async fn steps_down(c: Candidate) -> anyhow::Error {
    until(
        "the leader steps down",
        timings().renew_deadline + timings().retry_period + SLACK,
        || !c.leading(),
    )
    .await;
    c.task.await.unwrap().unwrap_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_two_leads_and_the_other_takes_over_when_it_stops_or_crashes() {
    let server = cluster().await;
    let admin = client(&server, server.admin_token()).await;
    let a = start(admin.clone(), "a");
    let b = start(admin.clone(), "b");
    let (both, done) = sample(
        [&a, &b]
            .iter()
            .map(|c| (c.working.clone(), c.status.clone()))
            .collect(),
    );
    let first = Duration::from_secs(10);
    until("a leader", first, || a.leading() || b.leading()).await;
    let (leader, standby) = if a.leading() { (a, b) } else { (b, a) };
    // the Lease says so (the namespace was created on the way), and the standby knows who leads
    let l = lease(&admin).await.spec.unwrap();
    assert_eq!(l.holder_identity.as_deref(), Some(leader.id.as_str()));
    assert_eq!(l.lease_duration_seconds, Some(3));
    assert!(l.acquire_time.is_some() && l.renew_time.is_some());
    until("the standby sees the holder", first, || {
        standby.status.borrow().holder.as_deref() == Some(leader.id.as_str())
    })
    .await;
    assert_eq!(
        standby.status.borrow().not_ready().unwrap(),
        format!("not the leader (leader is {})", leader.id)
    );
    // it keeps the Lease across several renewals
    tokio::time::sleep(timings().lease_duration * 2).await;
    assert!(leader.leading() && !standby.leading());
    let transitions = lease(&admin).await.spec.unwrap().lease_transitions;

    // A clean stop releases the Lease: the standby takes over at its next try. Told
    // apart from an expiry by the Lease's own history (a watch), not by how soon this
    // test sees it, which a loaded machine can delay by seconds.
    let history = lease_history(&admin, &standby.id).await;
    leader.stop.cancel();
    leader.task.await.unwrap().unwrap();
    assert!(!leader.working.load(Ordering::SeqCst), "work ended");
    until(
        "takeover after a clean stop",
        timings().lease_duration + timings().retry_period + SLACK * 2,
        || standby.leading(),
    )
    .await;
    let history = tokio::time::timeout(first, history)
        .await
        .expect("the watch sees the takeover")
        .unwrap();
    // the standby took it from the released record, not from the stopped leader's
    let [.., released, taken] = &history[..] else {
        panic!("a release, then the takeover: {history:?}");
    };
    assert_eq!(taken.holder_identity.as_deref(), Some(standby.id.as_str()));
    assert_eq!(released.holder_identity, None, "{history:?}");
    assert_eq!(released.lease_duration_seconds, Some(1));
    let since_release = taken
        .acquire_time
        .as_ref()
        .unwrap()
        .0
        .duration_since(released.renew_time.as_ref().unwrap().0);
    assert!(
        since_release < SignedDuration::try_from(timings().lease_duration).unwrap(),
        "released, not expired: taken {since_release:?} after the release"
    );
    let l = lease(&admin).await.spec.unwrap();
    assert_eq!(l.holder_identity.as_deref(), Some(standby.id.as_str()));
    assert_eq!(
        l.lease_transitions,
        transitions.map(|t| t + 1),
        "one transition"
    );

    // A crash releases nothing: a new candidate waits out the lease duration.
    let c = start(admin.clone(), "c");
    let (both_c, done_c) = sample(vec![
        (standby.working.clone(), standby.status.clone()),
        (c.working.clone(), c.status.clone()),
    ]);
    until("c sees the holder", first, || {
        c.status.borrow().holder.is_some()
    })
    .await;
    standby.task.abort();
    let crashed = Instant::now();
    until(
        "takeover after a crash",
        timings().lease_duration + timings().retry_period + SLACK,
        || c.leading(),
    )
    .await;
    let took = crashed.elapsed();
    // the crashed leader's last renewal was at most a retry period before the crash
    assert!(
        took + timings().retry_period >= timings().lease_duration,
        "taken over before the lease expired: {took:?}"
    );
    assert_eq!(
        lease(&admin).await.spec.unwrap().holder_identity.as_deref(),
        Some("c")
    );
    done.cancel();
    done_c.cancel();
    assert_eq!(both.load(Ordering::SeqCst), 0, "two leaders at once");
    assert_eq!(both_c.load(Ordering::SeqCst), 0, "two leaders at once");
    c.stop.cancel();
    c.task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_cannot_renew_steps_down_within_the_renew_deadline() {
    let server = cluster().await;
    server.add_token("a-token", kubesim::User::admin("a"));
    let a = sole_leader(client(&server, "a-token").await, "a").await;
    let admin = client(&server, server.admin_token()).await;
    let b = start(admin.clone(), "b");
    let (both, done) = sample(vec![
        (a.working.clone(), a.status.clone()),
        (b.working.clone(), b.status.clone()),
    ]);
    until("b sees a lead", Duration::from_secs(10), || {
        b.status.borrow().holder.as_deref() == Some("a")
    })
    .await;
    // a's credentials stop working: every renewal gets 401
    server.revoke_token("a-token");
    let revoked = Instant::now();
    let err = steps_down(a).await;
    assert!(
        format!("{err:#}").contains("lost the leader Lease causeway-system/leader-test"),
        "{err:#}"
    );
    until(
        "b takes over",
        timings().lease_duration + timings().retry_period + SLACK,
        || b.leading(),
    )
    .await;
    assert!(revoked.elapsed() + timings().retry_period >= timings().lease_duration);
    done.cancel();
    assert_eq!(both.load(Ordering::SeqCst), 0, "two leaders at once");
    b.stop.cancel();
    b.task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_api_server_makes_the_leader_step_down() {
    let server = cluster().await;
    let a = sole_leader(client(&server, server.admin_token()).await, "a").await;
    server.faults().set_drop_connections(true);
    let err = steps_down(a).await;
    assert!(format!("{err:#}").contains("renew deadline"), "{err:#}");
}

/// How late a timer may fire on a loaded test machine.
const LATE: Duration = Duration::from_millis(250);

/// Waits (at most `within`) until the leader `c` stops, and checks the moments it
/// stopped against its last renewal (`renewed`, else the Lease's `renewTime` on `server`
/// once it stopped; the leader writes it just before sending the renewal): it says it no
/// longer leads and its work's token is cancelled within the renew deadline, and work
/// that ignores its token is gone `work_ends` after the renewal.
async fn stops_in_time(
    server: &kubesim::Server,
    c: Candidate,
    renewed: Option<Timestamp>,
    (t, work_ends): (Timings, Duration),
    within: Duration,
) {
    let mut status = c.status.clone();
    let stepped_down = tokio::time::timeout(within, status.wait_for(|s| !s.leading))
        .await
        .map(|_| Timestamp::now())
        .expect("the leader steps down");
    let err = tokio::time::timeout(within, c.task)
        .await
        .expect("run returns")
        .unwrap()
        .unwrap_err();
    assert!(format!("{err:#}").contains("renew deadline"), "{err:#}");
    server.faults().set_latency(Duration::ZERO);
    server.faults().set_drop_connections(false);
    let renewed = match renewed {
        Some(r) => r,
        None => renew_time(&client(server, server.admin_token()).await).await,
    };
    let after = |at: Option<Timestamp>, what: &str| {
        let at = at.unwrap_or_else(|| panic!("{what}: never"));
        at.duration_since(renewed)
    };
    let bound = |d: Duration| SignedDuration::try_from(d + LATE).unwrap();
    let cancelled = after(*c.ends.cancelled.lock().unwrap(), "work cancelled");
    let ended = after(*c.ends.ended.lock().unwrap(), "work ended");
    let stepped_down = after(Some(stepped_down), "stepped down");
    assert!(
        stepped_down <= bound(t.renew_deadline),
        "says it leads until {stepped_down:?} after its last renewal"
    );
    assert!(
        cancelled <= bound(t.renew_deadline),
        "work cancelled {cancelled:?} after the last renewal"
    );
    assert!(
        ended <= bound(work_ends),
        "work ran until {ended:?} after the last renewal"
    );
}

/// A retry period near the renew deadline: one more full wait after a failed try
/// would overrun the deadline, and the lease.
const LONG_RETRY: Timings = Timings {
    lease_duration: Duration::from_secs(3),
    renew_deadline: Duration::from_secs(2),
    retry_period: Duration::from_millis(1900),
};

/// A server, its admin client, and a sole leader with `t` whose work ignores its
/// cancelled token.
async fn lingering_leader(t: Timings) -> (kubesim::Server, kube::Client, Candidate) {
    let server = cluster().await;
    let admin = client(&server, server.admin_token()).await;
    let a = start_with(admin.clone(), "a", t, Work::IgnoresCancel);
    until("a leads", Duration::from_secs(10), || a.leading()).await;
    (server, admin, a)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_renewals_fail_stops_within_the_renew_deadline_of_its_last_renewal() {
    let t = LONG_RETRY;
    let (server, _, a) = lingering_leader(t).await;
    server.faults().set_drop_connections(true);
    let within = t.lease_duration + SLACK;
    stops_in_time(&server, a, None, (t, t.lease_duration), within).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_api_server_gets_slow_stops_within_the_renew_deadline_of_its_last_renewal() {
    let t = Timings {
        lease_duration: Duration::from_secs(6),
        renew_deadline: Duration::from_secs(4),
        retry_period: Duration::from_millis(500),
    };
    let (server, admin, a) = lingering_leader(t).await;
    // slow, yet a renewal (a read and a write) fits in the renew deadline: it keeps leading
    let latency = Duration::from_millis(800);
    server.faults().set_latency(latency);
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.len() < 3 {
        assert!(Instant::now() < deadline, "renewals while slow: {seen:?}");
        let renewed = renew_time(&admin).await;
        if seen.last() != Some(&renewed) {
            seen.push(renewed);
        }
    }
    assert!(a.leading(), "a slow server is no reason to step down");
    // then requests hang: each is cut off at the deadline, whatever the client does
    server.faults().set_latency(Duration::from_secs(60));
    let within = t.lease_duration + latency + SLACK;
    stops_in_time(&server, a, None, (t, t.lease_duration), within).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_leader_whose_work_lingers_hands_over_by_the_renew_deadline_of_its_last_renewal()
{
    // no renewal for 1.9 s after taking the Lease
    let t = LONG_RETRY;
    let (server, admin, a) = lingering_leader(t).await;
    let renewed = renew_time(&admin).await;
    // stopped half-way to its first renewal, it may not drain for a whole renew
    // deadline from the stop signal
    tokio::time::sleep(Duration::from_secs(1)).await;
    a.stop.cancel();
    let within = t.renew_deadline + SLACK;
    stops_in_time(&server, a, Some(renewed), (t, t.renew_deadline), within).await;
    let l = lease(&admin).await.spec.unwrap();
    assert_eq!(l.holder_identity, None, "released");
}
