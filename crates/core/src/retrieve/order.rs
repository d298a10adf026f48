//! Ordering passages for a prompt: the strongest first and last, the weakest in the middle,
//! where long-context models attend least ("lost in the middle", Liu et al. 2023).

/// Reorders items given best first so that ranks 1, 3, 5, … lead and ranks … 6, 4, 2 close:
/// `[1, 2, 3, 4, 5]` becomes `[1, 3, 5, 4, 2]`.
pub fn lost_in_the_middle<T>(ranked: Vec<T>) -> Vec<T> {
    let mut front = Vec::with_capacity(ranked.len());
    let mut back = Vec::with_capacity(ranked.len() / 2);
    for (i, item) in ranked.into_iter().enumerate() {
        if i % 2 == 0 {
            front.push(item);
        } else {
            back.push(item);
        }
    }
    front.extend(back.into_iter().rev());
    front
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strongest_at_both_ends() {
        assert_eq!(lost_in_the_middle(vec![1, 2, 3, 4, 5]), vec![1, 3, 5, 4, 2]);
        assert_eq!(lost_in_the_middle(vec![1, 2, 3, 4]), vec![1, 3, 4, 2]);
        assert_eq!(lost_in_the_middle(vec![1]), vec![1]);
        assert!(lost_in_the_middle(Vec::<u8>::new()).is_empty());
    }

    proptest::proptest! {
        #[test]
        fn a_permutation_with_the_best_two_at_the_ends(n in 2usize..40) {
            let out = lost_in_the_middle((0..n).collect::<Vec<_>>());
            let mut sorted = out.clone();
            sorted.sort();
            proptest::prop_assert_eq!(sorted, (0..n).collect::<Vec<_>>());
            proptest::prop_assert_eq!(out[0], 0);
            proptest::prop_assert_eq!(out[n - 1], 1);
        }
    }
}
