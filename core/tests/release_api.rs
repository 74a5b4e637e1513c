//! The library as others build it (no `cfg(test)`, no `cfg(grantid_loom)`)
//! has none of the cursor's test-only mutants: the broken switches the loom
//! models use to show that they bite (core/src/cursor.rs) are not callable
//! from a release build.
#![cfg(not(grantid_loom))]

use std::cell::Cell;

use grantid::Layout;
use grantid::cursor::{Cursor, Shape};

thread_local! {
    /// How many calls reached the stand-ins below, not the cursor.
    static STAND_INS: Cell<u32> = const { Cell::new(0) };
}

/// Stand-ins with the mutants' names and signatures. A method call takes
/// an inherent method over a trait's, so a call reaches these only when
/// `Cursor` has no method of that name.
trait Mutants {
    fn install_params_last_for_tests(&self, generation: u64, worker: u64, base: u64, end: u64);
    fn reached_unsealed_for_tests(&self) -> u64;
    fn install_unsealed_for_tests(&self, generation: u64, worker: u64, base: u64, end: u64);
}

impl Mutants for Cursor {
    fn install_params_last_for_tests(&self, _: u64, _: u64, _: u64, _: u64) {
        STAND_INS.with(|n| n.set(n.get() + 1));
    }
    fn reached_unsealed_for_tests(&self) -> u64 {
        STAND_INS.with(|n| n.set(n.get() + 1));
        0
    }
    fn install_unsealed_for_tests(&self, _: u64, _: u64, _: u64, _: u64) {
        STAND_INS.with(|n| n.set(n.get() + 1));
    }
}

#[test]
fn the_cursor_mutants_are_not_in_a_release_build() {
    let cursor = Cursor::new(Shape::new(&Layout::new(12, 2, 4).unwrap(), 1, 0).unwrap());
    cursor.install(1, 0, 10, 20);
    cursor.install_params_last_for_tests(2, 1, 10, 20);
    cursor.reached_unsealed_for_tests();
    cursor.install_unsealed_for_tests(3, 1, 10, 20);
    assert_eq!(
        STAND_INS.with(Cell::get),
        3,
        "a test-only mutant of the cursor is compiled into the library"
    );
}
