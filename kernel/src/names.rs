//! The kernel-wide name board of `publish`/`lookup` (how programs find each other), with its
//! authority rules:
//!
//! - a name belongs to the program that first published it: only that program may publish it
//!   again (change its value); another program's `publish` of it is refused (`EPERM`);
//! - a program holds at most [`NAMES_PER_PROGRAM`] names at once (`ENOMEM` beyond), so no
//!   program can grow the kernel heap through names;
//! - a program's names go with it: when it ends, [`NameBoard::forget`] removes them, and a
//!   `lookup` answers `EAGAIN` again.
//!
//! Anyone may look a name up. Pure logic, host-tested.

use alloc::collections::BTreeMap;

/// The machine's name board.
pub static BOARD: arch::sync::Mutex<NameBoard> = arch::sync::Mutex::new(NameBoard::new());

/// Most names one program may hold at once.
pub const NAMES_PER_PROGRAM: usize = 64;

/// Why a `publish` was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PublishError {
    /// Another program owns the name.
    NotOwner,
    /// The program holds [`NAMES_PER_PROGRAM`] names already.
    Quota,
}

/// One published name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Name {
    value: u64,
    /// Id of the program that published it.
    owner: u64,
}

/// Names by key, with their owners.
#[derive(Debug, Default)]
pub struct NameBoard {
    names: BTreeMap<u64, Name>,
    /// Names held per program (only programs holding at least one).
    held: BTreeMap<u64, usize>,
}

impl NameBoard {
    /// An empty board.
    pub const fn new() -> NameBoard {
        NameBoard { names: BTreeMap::new(), held: BTreeMap::new() }
    }

    /// Program `owner` sets `key` to `value`.
    pub fn publish(&mut self, owner: u64, key: u64, value: u64) -> Result<(), PublishError> {
        if let Some(name) = self.names.get_mut(&key) {
            if name.owner != owner {
                return Err(PublishError::NotOwner);
            }
            name.value = value;
            return Ok(());
        }
        let held = self.held.entry(owner).or_insert(0);
        if *held >= NAMES_PER_PROGRAM {
            return Err(PublishError::Quota);
        }
        *held += 1;
        self.names.insert(key, Name { value, owner });
        Ok(())
    }

    /// The value published under `key`, if any.
    pub fn lookup(&self, key: u64) -> Option<u64> {
        self.names.get(&key).map(|n| n.value)
    }

    /// Removes every name of program `owner` (it ended).
    pub fn forget(&mut self, owner: u64) {
        if self.held.remove(&owner).is_some() {
            self.names.retain(|_, n| n.owner != owner);
        }
    }

    /// How many names are published.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether no name is published.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_name_belongs_to_its_publisher() {
        let mut b = NameBoard::new();
        assert_eq!(b.publish(1, 7, 100), Ok(()));
        assert_eq!(b.publish(2, 7, 666), Err(PublishError::NotOwner));
        assert_eq!(b.lookup(7), Some(100));
        assert_eq!(b.publish(1, 7, 101), Ok(()));
        assert_eq!(b.lookup(7), Some(101));
        b.forget(1);
        assert_eq!(b.lookup(7), None);
        assert_eq!(b.publish(2, 7, 5), Ok(()), "a forgotten name is free again");
    }

    #[test]
    fn a_program_holds_a_bounded_number_of_names() {
        let mut b = NameBoard::new();
        for key in 0..NAMES_PER_PROGRAM as u64 {
            assert_eq!(b.publish(1, key, key), Ok(()));
        }
        assert_eq!(b.publish(1, 1000, 0), Err(PublishError::Quota));
        assert_eq!(b.publish(1, 3, 9), Ok(()), "changing a held name needs no new slot");
        assert_eq!(b.publish(2, 1000, 0), Ok(()), "another program has its own quota");
        b.forget(1);
        assert_eq!(b.len(), 1);
    }

    proptest! {
        /// Against a model: every name's value is its owner's last publish, no program ever
        /// holds more than the quota, and forgetting leaves only other programs' names.
        #[test]
        fn matches_a_model(ops in proptest::collection::vec((0u64..4, 0u64..80, any::<u64>(), any::<bool>()), 0..400)) {
            let mut b = NameBoard::new();
            let mut model: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
            for (owner, key, value, forget) in ops {
                if forget {
                    b.forget(owner);
                    model.retain(|_, (o, _)| *o != owner);
                    continue;
                }
                let held = model.values().filter(|(o, _)| *o == owner).count();
                let expected = match model.get(&key) {
                    Some((o, _)) if *o != owner => Err(PublishError::NotOwner),
                    Some(_) => Ok(()),
                    None if held >= NAMES_PER_PROGRAM => Err(PublishError::Quota),
                    None => Ok(()),
                };
                prop_assert_eq!(b.publish(owner, key, value), expected);
                if expected.is_ok() {
                    model.insert(key, (owner, value));
                }
                for o in 0..4 {
                    prop_assert!(model.values().filter(|(x, _)| *x == o).count() <= NAMES_PER_PROGRAM);
                }
            }
            prop_assert_eq!(b.len(), model.len());
            for (key, (_, value)) in &model {
                prop_assert_eq!(b.lookup(*key), Some(*value));
            }
        }
    }
}
