//! Listings as aligned tables (kubectl's look), JSON or YAML.

use serde::Serialize;

use crate::{Error, args::Output};

/// A table: upper-case headers, columns separated by at least three spaces, `-` for empty cells.
#[derive(Debug, Default)]
pub struct Table {
    pub headers: Vec<&'static str>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&'static str]) -> Table {
        Table {
            headers: headers.to_vec(),
            rows: Vec::new(),
        }
    }

    pub fn push(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }

    pub fn render(&self) -> String {
        let cell = |s: &str| -> String {
            let s = crate::one_line(s);
            if s.is_empty() { "-".into() } else { s }
        };
        let rows: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|r| r.iter().map(|c| cell(c)).collect())
            .collect();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &rows {
            for (i, c) in row.iter().enumerate() {
                if i < widths.len() {
                    widths[i] = widths[i].max(c.chars().count());
                }
            }
        }
        let line = |cells: Vec<&str>| -> String {
            let last = cells.len().saturating_sub(1);
            let mut out = String::new();
            for (i, c) in cells.iter().enumerate() {
                out.push_str(c);
                if i < last {
                    let pad = widths[i] - c.chars().count() + 3;
                    out.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push('\n');
            out
        };
        let mut out = line(self.headers.to_vec());
        for row in &rows {
            out.push_str(&line(row.iter().map(String::as_str).collect()));
        }
        out
    }
}

/// `value` as JSON or YAML text (for `Output::Table`, the caller renders its table).
pub fn structured<T: Serialize>(value: &T, output: Output) -> Result<String, Error> {
    let text = match output {
        Output::Json => serde_json::to_string_pretty(value).map(|mut s| {
            s.push('\n');
            s
        }),
        Output::Yaml | Output::Table => {
            return xcc_kube::yaml::to_string(value)
                .map_err(|e| Error::Failed(format!("cannot write YAML: {e}")));
        }
    };
    text.map_err(|e| Error::Failed(format!("cannot write JSON: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_aligned_and_empty_cells_dashed() {
        let mut table = Table::new(&["CONTEXT", "CLUSTER", "USER"]);
        table.push(vec![
            "primary".into(),
            "kubernetes".into(),
            "kubernetes-admin".into(),
        ]);
        table.push(vec![
            "secondary1".into(),
            "v1262-cluster".into(),
            String::new(),
        ]);
        assert_eq!(
            table.render(),
            "CONTEXT      CLUSTER         USER\n\
             primary      kubernetes      kubernetes-admin\n\
             secondary1   v1262-cluster   -\n"
        );
    }

    #[test]
    fn cells_are_one_line() {
        let mut table = Table::new(&["KIND", "REASON"]);
        table.push(vec!["Cluster".into(), "two\nlines".into()]);
        assert_eq!(table.render(), "KIND      REASON\nCluster   two lines\n");
    }

    #[test]
    fn json_and_yaml() {
        let value = serde_json::json!({"items": [{"name": "a"}]});
        assert_eq!(
            structured(&value, Output::Json).unwrap(),
            "{\n  \"items\": [\n    {\n      \"name\": \"a\"\n    }\n  ]\n}\n"
        );
        assert_eq!(
            structured(&value, Output::Yaml).unwrap(),
            "items:\n- name: a\n"
        );
    }
}
