//! The second sink of the README, `connector/examples/file_sink.rs`, run
//! whole as a test so that it cannot rot: it archives 30,000 records from
//! the mock cluster, runs again (which must resume from its own marks and
//! write nothing), and checks every partition's file holds each offset once,
//! in order, from 0.

#[path = "../examples/file_sink.rs"]
mod file_sink;

#[test]
fn the_file_sink_example_holds_each_record_once_after_two_runs() {
    file_sink::main().expect("the file sink example");
}
