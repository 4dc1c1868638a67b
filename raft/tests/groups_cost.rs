//! The `groups_cost` example, small, as a smoke test: 8 single-voter groups on one node start
//! and lead, and puts to one group and spread over 8 are each acknowledged and held by the
//! group they were written to. It asserts no figure: those are the example's to measure.

#[allow(dead_code)]
#[path = "../examples/groups_cost.rs"]
mod groups_cost;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_groups_start_idle_and_hold_their_writes() {
    let args = groups_cost::Args {
        groups: vec![8],
        idle_secs: 0,
        writes: 160,
        clients: 8,
        value_bytes: 100,
        memtable_bytes: 0,
        heartbeat_ms: 100,
        voters: 1,
        quiet: true,
    };
    groups_cost::idle_cost(8, &args).await.unwrap();
    for groups in [1, 8] {
        let rate = groups_cost::throughput(groups, &args).await.unwrap();
        assert!(rate > 0.0, "{groups} group(s): {rate} puts/s");
    }
}
