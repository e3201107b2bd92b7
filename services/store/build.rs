// `sqlx::migrate!` embeds the PostgreSQL migrations at compile time; a file
// added to or changed in their folder must rebuild the crate.
fn main() {
    println!("cargo:rerun-if-changed=../../migrations/postgres");
}
