// A user operator: `Row` is the row type at this point of the chain.
pub fn shout(row: &mut Row) -> bool {
    if row.items_quantity < 0 {
        return false;
    }
    row.items_sku = std::borrow::Cow::Owned(row.items_sku.to_uppercase());
    true
}
