use clap::Parser;
fn main() {
    let _ = sprout::cli::Args::parse();
}
