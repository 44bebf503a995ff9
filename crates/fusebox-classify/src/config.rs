//! Configuration errors shared by every fusebox builder.
//!
//! A builder checks everything and reports every problem at once, each with the path of the
//! field and the rule it breaks: `breaker.failure_rate_threshold: must be within 1..=100,
//! got 150`. Nothing in fusebox panics on a bad configuration.

use std::fmt;

/// One broken rule in a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    path: String,
    rule: String,
}

impl Problem {
    /// The field, as a dotted path (`breaker.minimum_calls`).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The rule and the value that broke it (`must be at least 1, got 0`).
    pub fn rule(&self) -> &str {
        &self.rule
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.rule)
    }
}

/// An invalid configuration: every problem found, each naming its field and rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    problems: Vec<Problem>,
}

impl ConfigError {
    /// An error with one problem.
    pub fn new(path: impl Into<String>, rule: impl Into<String>) -> Self {
        ConfigError {
            problems: vec![Problem {
                path: path.into(),
                rule: rule.into(),
            }],
        }
    }

    /// Every problem found, in the order they were found.
    pub fn problems(&self) -> &[Problem] {
        &self.problems
    }

    /// Puts `prefix.` in front of every path (for configurations nested in others).
    pub fn prefixed(mut self, prefix: &str) -> Self {
        if !prefix.is_empty() {
            for p in &mut self.problems {
                p.path = format!("{prefix}.{}", p.path);
            }
        }
        self
    }

    /// Adds the problems of `other`.
    pub fn extend(&mut self, other: ConfigError) {
        self.problems.extend(other.problems);
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.problems.as_slice() {
            [one] => write!(f, "invalid configuration: {one}"),
            many => {
                write!(f, "invalid configuration ({} problems)", many.len())?;
                for p in many {
                    write!(f, "; {p}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for ConfigError {}

/// Collects problems while a builder checks its fields.
#[derive(Debug, Default)]
pub struct Validator {
    problems: Vec<Problem>,
}

impl Validator {
    /// An empty validator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a problem when `ok` is false.
    pub fn check(&mut self, ok: bool, path: &str, rule: impl FnOnce() -> String) {
        if !ok {
            self.problems.push(Problem {
                path: path.to_owned(),
                rule: rule(),
            });
        }
    }

    /// Records a problem.
    pub fn fail(&mut self, path: impl Into<String>, rule: impl Into<String>) {
        self.problems.push(Problem {
            path: path.into(),
            rule: rule.into(),
        });
    }

    /// Adds the problems of a nested configuration under `prefix`.
    pub fn nested<T>(&mut self, prefix: &str, result: Result<T, ConfigError>) -> Option<T> {
        match result {
            Ok(v) => Some(v),
            Err(e) => {
                self.problems.extend(e.prefixed(prefix).problems);
                None
            }
        }
    }

    /// `Ok(value)` when no problem was found, else every problem.
    pub fn finish<T>(self, value: T) -> Result<T, ConfigError> {
        if self.problems.is_empty() {
            Ok(value)
        } else {
            Err(ConfigError {
                problems: self.problems,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_every_problem_with_its_path() {
        let mut v = Validator::new();
        v.check(false, "failure_rate_threshold", || {
            "must be within 1..=100, got 150".into()
        });
        v.check(true, "minimum_calls", || unreachable!());
        v.nested::<()>(
            "window",
            Err(ConfigError::new("size", "must be at least 1, got 0")),
        );
        let err = v.finish(()).unwrap_err().prefixed("breaker");
        assert_eq!(err.problems().len(), 2);
        assert_eq!(err.problems()[1].path(), "breaker.window.size");
        assert_eq!(
            err.to_string(),
            "invalid configuration (2 problems); breaker.failure_rate_threshold: must be within 1..=100, got 150; breaker.window.size: must be at least 1, got 0"
        );
        assert_eq!(
            ConfigError::new("a", "b").to_string(),
            "invalid configuration: a: b"
        );
    }
}
