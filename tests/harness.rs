//! The harness the other tests stand on: a server it hands over is the one
//! it started, not another process that took the port first.

use support::*;

#[test]
fn a_port_another_process_listens_on_is_not_taken_for_our_redis() {
    // Another process's listener on the port our Redis is told to use: the
    // Redis exits unable to bind, and the harness must say so, not answer
    // the other listener's connections as ours.
    let port = free_port();
    let _other = std::net::TcpListener::bind(("127.0.0.1", port)).expect("bind");
    let started = std::panic::catch_unwind(|| Redis::start_on(port));
    let why = *started.err().expect("the harness refused the port").downcast::<String>().expect("a message");
    assert!(why.contains("exited") && why.contains("before listening"), "{why}");

    // A Redis on a port of its own is ready when the harness answers.
    let ours = Redis::start();
    let mut conn = redis::Client::open(ours.url()).unwrap().get_connection().unwrap();
    let pong: String = redis::cmd("PING").query(&mut conn).unwrap();
    assert_eq!(pong, "PONG");
}
