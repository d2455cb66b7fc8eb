use super::*;

pub fn other() {
    thing();
}

#[cfg(test)]
mod tests {
    use super::*;
}
