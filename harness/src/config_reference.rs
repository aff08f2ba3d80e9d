//! The config reference (docs/config.md), rendered from the config types' JSON schemas: every section
//! and key with its type, default and doc comment, so the reference cannot drift from the code.
use serde_json::{Map, Value};
use std::fmt::Write;

/// One command's config: the command's name and the schema of its config type
/// (`schemars::schema_for!(Config)`).
pub struct CommandSchema {
    pub command: &'static str,
    pub schema: schemars::Schema,
}

/// The whole reference: `intro` (Markdown), then one chapter per command.
pub fn markdown(intro: &str, commands: &[CommandSchema]) -> String {
    let mut out = String::from(intro.trim_end());
    out.push('\n');
    for c in commands {
        let root = c.schema.as_value();
        let defs = root.get("$defs").and_then(Value::as_object);
        let doc = Doc {
            defs: defs.cloned().unwrap_or_default(),
        };
        let _ = write!(out, "\n## `{}`\n", c.command);
        if let Some(text) = root.get("description").and_then(Value::as_str) {
            let _ = write!(out, "\n{}\n", one_paragraph(text));
        }
        doc.section(&mut out, "", root);
    }
    out
}

struct Doc {
    defs: Map<String, Value>,
}

impl Doc {
    /// `schema` with a `$ref` followed, and whether it admits null (an `Option`).
    fn resolve<'a>(&'a self, schema: &'a Value) -> (&'a Value, bool) {
        if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
            let name = r.trim_start_matches("#/$defs/");
            if let Some(def) = self.defs.get(name) {
                return (self.resolve(def).0, false);
            }
        }
        if let Some(any) = schema.get("anyOf").and_then(Value::as_array) {
            let is_null = |s: &Value| s.get("type") == Some(&Value::from("null"));
            if let [a, b] = any.as_slice() {
                match (is_null(a), is_null(b)) {
                    (false, true) => return (self.resolve(a).0, true),
                    (true, false) => return (self.resolve(b).0, true),
                    _ => {}
                }
            }
        }
        let nullable = schema
            .get("type")
            .and_then(Value::as_array)
            .is_some_and(|t| t.contains(&Value::from("null")));
        (schema, nullable)
    }

    /// The keys of an object schema as a table, then its sub-sections (nested structs and the
    /// variants of a tagged enum), each under its dotted path.
    fn section(&self, out: &mut String, path: &str, object: &Value) {
        let Some(props) = object.get("properties").and_then(Value::as_object) else {
            return;
        };
        let required: Vec<&str> = object
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut rows = Vec::new();
        let mut subsections = Vec::new();
        for (key, prop) in props {
            let (target, nullable) = self.resolve(prop);
            if target.get("const").is_some() {
                continue; // the variant's tag, named in the heading
            }
            let dotted = if path.is_empty() {
                key.clone()
            } else {
                format!("{path}.{key}")
            };
            if target.get("properties").is_some() || variants(target).is_some() {
                subsections.push((dotted, prop, target));
                continue;
            }
            let default = match prop.get("default") {
                Some(v) => format!("`{}`", value_text(v)),
                None if required.contains(&key.as_str()) => "**required**".into(),
                None if nullable => "unset".into(),
                None => String::new(),
            };
            let mut meaning = description(prop)
                .or_else(|| description(target))
                .map(one_paragraph)
                .unwrap_or_default();
            if let Some(values) = value_docs(target) {
                if !meaning.is_empty() {
                    meaning.push(' ');
                }
                meaning.push_str(&values);
            }
            rows.push(format!(
                "| `{key}` | {} | {default} | {} |",
                cell(&self.type_text(target)),
                cell(&meaning)
            ));
        }
        if !rows.is_empty() {
            let _ = writeln!(out, "\n| key | type | default | meaning |");
            let _ = writeln!(out, "|---|---|---|---|");
            for row in rows {
                let _ = writeln!(out, "{row}");
            }
        }
        for (dotted, prop, target) in subsections {
            let heading = |out: &mut String, tag: Option<String>| {
                let tag = tag.map_or_else(String::new, |t| format!(" with `{t}`"));
                let _ = write!(out, "\n### `[{dotted}]`{tag}\n");
            };
            match variants(target) {
                Some(list) => {
                    if let Some(text) = description(prop).or_else(|| description(target)) {
                        heading(out, None);
                        let _ = write!(out, "\n{}\n", one_paragraph(text));
                    }
                    for variant in list {
                        heading(out, variant_tag(variant));
                        if let Some(text) = description(variant) {
                            let _ = write!(out, "\n{}\n", one_paragraph(text));
                        }
                        self.section(out, &dotted, variant);
                    }
                }
                None => {
                    heading(out, None);
                    if let Some(text) = description(prop).or_else(|| description(target)) {
                        let _ = write!(out, "\n{}\n", one_paragraph(text));
                    }
                    self.section(out, &dotted, target);
                }
            }
        }
    }

    /// `string`, `integer`, `"a"` \| `"b"`, `list of string`...
    fn type_text(&self, schema: &Value) -> String {
        let (schema, _) = self.resolve(schema);
        if let Some(values) = enum_values(schema) {
            return values
                .iter()
                .map(|(v, _)| format!("`\"{v}\"`"))
                .collect::<Vec<_>>()
                .join(" | ");
        }
        let kind = match schema.get("type") {
            Some(Value::String(t)) => t.clone(),
            Some(Value::Array(ts)) => ts
                .iter()
                .filter_map(Value::as_str)
                .find(|t| *t != "null")
                .unwrap_or("any")
                .to_string(),
            _ => "any".into(),
        };
        match kind.as_str() {
            "array" => match schema.get("items") {
                Some(items) => format!("list of {}", self.type_text(items)),
                None => "list".into(),
            },
            "number" => "float".into(),
            other => other.into(),
        }
    }
}

/// The variants of an internally tagged enum: object schemas, each with one `const` property.
fn variants(schema: &Value) -> Option<&Vec<Value>> {
    let list = schema.get("oneOf")?.as_array()?;
    list.iter()
        .all(|v| v.get("properties").is_some())
        .then_some(list)
}

/// `source = "model"`: the constant property of a variant.
fn variant_tag(variant: &Value) -> Option<String> {
    variant
        .get("properties")?
        .as_object()?
        .iter()
        .find_map(|(k, p)| Some(format!("{k} = \"{}\"", p.get("const")?.as_str()?)))
}

/// The values of a string enum with their doc comments (unit variants).
fn enum_values(schema: &Value) -> Option<Vec<(String, Option<String>)>> {
    if let Some(list) = schema.get("enum").and_then(Value::as_array) {
        return list
            .iter()
            .map(|v| Some((v.as_str()?.to_string(), None)))
            .collect();
    }
    schema
        .get("oneOf")?
        .as_array()?
        .iter()
        .map(|v| {
            let value = v.get("const")?.as_str()?.to_string();
            Some((value, description(v).map(one_paragraph)))
        })
        .collect()
}

/// "`a`: what a is. `b`: what b is." for an enum whose values are documented.
fn value_docs(schema: &Value) -> Option<String> {
    let values = enum_values(schema)?;
    let docs: Vec<String> = values
        .into_iter()
        .filter_map(|(v, doc)| Some(format!("`{v}`: {}", doc?)))
        .collect();
    (!docs.is_empty()).then(|| docs.join(" "))
}

fn description(schema: &Value) -> Option<&str> {
    schema.get("description").and_then(Value::as_str)
}

/// A doc comment on one line (Markdown paragraphs joined).
fn one_paragraph(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A default as it is written in TOML.
fn value_text(v: &Value) -> String {
    match v {
        Value::Null => "unset".into(),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(value_text).collect::<Vec<_>>().join(", ")
        ),
        other => other.to_string(),
    }
}

/// Text that can sit in a table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};

    /// Where to go.
    #[derive(Serialize, Deserialize, JsonSchema, Default)]
    #[serde(rename_all = "lowercase")]
    enum Way {
        /// On foot.
        #[default]
        Walk,
        /// By bus.
        Bus,
    }

    /// The inner section.
    #[derive(Serialize, Deserialize, JsonSchema)]
    #[serde(default)]
    struct Inner {
        /// How many.
        count: u64,
        /// Tags | labels.
        tags: Vec<String>,
        /// The way.
        way: Way,
        /// Perhaps.
        maybe: Option<f64>,
    }

    impl Default for Inner {
        fn default() -> Self {
            Inner {
                count: 3,
                tags: vec!["a".into()],
                way: Way::Bus,
                maybe: None,
            }
        }
    }

    /// A tagged source.
    #[derive(Serialize, Deserialize, JsonSchema)]
    #[serde(tag = "source", rename_all = "lowercase")]
    enum Source {
        /// From a file.
        File {
            /// The file.
            path: String,
        },
    }

    /// The whole config.
    #[derive(Serialize, Deserialize, JsonSchema)]
    struct Outer {
        /// Its name.
        name: String,
        /// The inner one.
        #[serde(default)]
        inner: Inner,
        /// Where from.
        data: Source,
    }

    #[test]
    fn every_key_has_its_type_default_and_doc() {
        let md = markdown(
            "# Reference",
            &[CommandSchema {
                command: "tool",
                schema: schemars::schema_for!(Outer),
            }],
        );
        let want = "# Reference

## `tool`

The whole config.

| key | type | default | meaning |
|---|---|---|---|
| `name` | string | **required** | Its name. |

### `[data]`

Where from.

### `[data]` with `source = \"file\"`

From a file.

| key | type | default | meaning |
|---|---|---|---|
| `path` | string | **required** | The file. |

### `[inner]`

The inner one.

| key | type | default | meaning |
|---|---|---|---|
| `count` | integer | `3` | How many. |
| `maybe` | float | `unset` | Perhaps. |
| `tags` | list of string | `[\"a\"]` | Tags \\| labels. |
| `way` | `\"walk\"` \\| `\"bus\"` | `\"bus\"` | The way. `walk`: On foot. `bus`: By bus. |
";
        assert_eq!(md, want, "{md}");
    }
}
