//! The order statistics the suite shares, defined once: every crate may depend on this one.

/// The median of `values`: the middle value of the sorted values, and for an even count the mean
/// of the two middle ones (as polars, numpy and R define it). NaN sorts last (`f64::total_cmp`).
/// None for no values.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v = values.to_vec();
    median_in_place(&mut v)
}

/// [`median`] sorting `values` in place (no allocation).
pub fn median_in_place(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable_by(f64::total_cmp);
    let n = values.len();
    Some(if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_and_even_counts() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
        // an even count: the mean of the two middle values, not the upper one
        assert_eq!(median(&[4.0, 1.0, 2.0, 10.0]), Some(3.0));
        assert_eq!(median(&[1.0, f64::NAN, 2.0]), Some(2.0));
    }
}
