//! Starts a generator on an in-memory authority, prints a few IDs and their
//! decoded fields, and a batch's range.

use grantid::{Generator, Layout, MemoryAuthority};

fn main() -> Result<(), grantid::Error> {
    let generator =
        Generator::builder(Layout::default(), "example-v1", MemoryAuthority::new()).start()?;
    for _ in 0..5 {
        let id = generator.next_id()?;
        let d = generator.decode(id)?;
        println!(
            "{id}  timestamp={} worker={} sequence={} unix_ms={}",
            d.timestamp, d.worker, d.sequence, d.unix_ms
        );
    }
    let batch = generator.next_ids(1_000)?;
    println!(
        "batch of {}: {} ..= {}",
        batch.len(),
        batch[0],
        batch[batch.len() - 1]
    );
    println!("{:?}", generator.stats());
    generator.close();
    Ok(())
}
