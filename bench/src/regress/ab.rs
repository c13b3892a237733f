//! The order of an A/B comparison: pairs of runs in ABBA order (reference first on even
//! pairs, candidate first on odd ones), so that drift of the machine's speed during the
//! session falls on both sides alike.
//!
//! Contract: [`alternate`] calls the caller's run function exactly twice per pair, in that
//! order, stops at the first error, and returns the results paired in pair order. It
//! measures nothing itself; every A/B comparison (worker processes in [`super::worker`],
//! in-process comparisons in tests and tools) runs through it.

/// Which side of an A/B comparison a replay measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The reference (baseline build or config).
    Reference,
    /// The candidate (the build or config under test).
    Candidate,
}

/// `pairs` pairs of replays in ABBA order: the reference first on even pairs, the
/// candidate first on odd ones, so drift of the machine's speed during the session falls
/// on both sides alike. `run(side, pair)` measures one replay; `on_pair(pair, reference,
/// candidate)` is called after each pair (progress). Stops at the first error. Returns
/// (reference, candidate) results, in pair order. Every A/B comparison here runs through
/// this: [`super::worker::run_ab`] (builds in worker processes) and in-process comparisons.
pub fn alternate<T, E>(
    pairs: usize,
    mut run: impl FnMut(Side, usize) -> Result<T, E>,
    mut on_pair: impl FnMut(usize, &T, &T),
) -> Result<(Vec<T>, Vec<T>), E> {
    let (mut refs, mut cands) = (Vec::with_capacity(pairs), Vec::with_capacity(pairs));
    for i in 0..pairs {
        let (r, c) = if i % 2 == 0 {
            let r = run(Side::Reference, i)?;
            (r, run(Side::Candidate, i)?)
        } else {
            let c = run(Side::Candidate, i)?;
            (run(Side::Reference, i)?, c)
        };
        on_pair(i, &r, &c);
        refs.push(r);
        cands.push(c);
    }
    Ok((refs, cands))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alternate_runs_abba_and_keeps_pair_order() {
        let mut order = Vec::new();
        let mut pairs_seen = Vec::new();
        let (r, c) = alternate(
            4,
            |side, i| {
                order.push((side, i));
                Ok::<_, ()>((side, i))
            },
            |i, r, c| pairs_seen.push((i, r.1, c.1)),
        )
        .unwrap();
        use Side::{Candidate as C, Reference as R};
        assert_eq!(
            order,
            [
                (R, 0),
                (C, 0),
                (C, 1),
                (R, 1),
                (R, 2),
                (C, 2),
                (C, 3),
                (R, 3)
            ]
        );
        assert_eq!(r, [(R, 0), (R, 1), (R, 2), (R, 3)]);
        assert_eq!(c, [(C, 0), (C, 1), (C, 2), (C, 3)]);
        assert_eq!(pairs_seen, [(0, 0, 0), (1, 1, 1), (2, 2, 2), (3, 3, 3)]);
    }

    #[test]
    fn alternate_stops_at_the_first_error() {
        let mut runs = 0;
        let e = alternate(
            5,
            |side, i| {
                runs += 1;
                if side == Side::Candidate && i == 1 {
                    Err(format!("pair {i} failed"))
                } else {
                    Ok(())
                }
            },
            |_, _, _| {},
        )
        .unwrap_err();
        assert_eq!(e, "pair 1 failed");
        assert_eq!(runs, 3, "pair 0 (two runs) and the candidate of pair 1");
    }
}
