//! API tokens: rows of `tokens`. The secret is never stored, only its
//! Argon2 hash (see `auth.rs`).

use anyhow::{Context, Result};
use serde::Serialize;
use sqlx::Row;
use sqlx::any::AnyRow;

use super::db::Db;

const TOKEN_COLUMNS: &str = "id, name, role, secret_hash, created_at_ms";

/// One row of `tokens`. The secret itself is never stored, only its hash.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct TokenRecord {
    /// Short public id, the prefix of the token a client presents.
    pub(crate) id: String,
    /// What the token is for, as its creator named it.
    pub(crate) name: String,
    /// What the token may do.
    pub(crate) role: String,
    /// Argon2 hash (PHC string) of the token's secret part.
    #[serde(skip)]
    pub(crate) secret_hash: String,
    /// Creation time, milliseconds since the Unix epoch.
    pub(crate) created_at_ms: i64,
}

impl Db {
    /// Stores a new token. Fails when its id is taken.
    pub(crate) async fn insert_token(&self, token: &TokenRecord) -> Result<()> {
        sqlx::query(&format!("INSERT INTO tokens ({TOKEN_COLUMNS}) VALUES ($1, $2, $3, $4, $5)"))
            .bind(token.id.as_str())
            .bind(token.name.as_str())
            .bind(token.role.as_str())
            .bind(token.secret_hash.as_str())
            .bind(token.created_at_ms)
            .execute(&self.pool)
            .await
            .with_context(|| format!("tokens insert {}", token.id))?;
        Ok(())
    }

    /// The token whose public id is `id`.
    pub(crate) async fn get_token(&self, id: &str) -> Result<Option<TokenRecord>> {
        let row = sqlx::query(&format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .with_context(|| format!("tokens get {id}"))?;
        row.as_ref().map(token_from_row).transpose()
    }

    /// Every token, oldest first.
    pub(crate) async fn list_tokens(&self) -> Result<Vec<TokenRecord>> {
        let rows = sqlx::query(&format!("SELECT {TOKEN_COLUMNS} FROM tokens ORDER BY created_at_ms, id"))
            .fetch_all(&self.pool)
            .await
            .context("tokens list")?;
        rows.iter().map(token_from_row).collect()
    }

    /// How many tokens exist (zero means the server has not been set up).
    pub(crate) async fn count_tokens(&self) -> Result<u64> {
        let count: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM tokens").fetch_one(&self.pool).await.context("tokens count")?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// Revokes the token `id`. False when there was none.
    pub(crate) async fn delete_token(&self, id: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM tokens WHERE id = $1")
            .bind(id)
            .execute(&self.pool)
            .await
            .with_context(|| format!("tokens delete {id}"))?;
        Ok(done.rows_affected() > 0)
    }
}

fn token_from_row(row: &AnyRow) -> Result<TokenRecord> {
    let id: String = row.try_get("id").context("tokens row: id")?;
    let column = |name: &str| format!("tokens row {id}: column {name}");
    Ok(TokenRecord {
        name: row.try_get("name").with_context(|| column("name"))?,
        role: row.try_get("role").with_context(|| column("role"))?,
        secret_hash: row.try_get("secret_hash").with_context(|| column("secret_hash"))?,
        created_at_ms: row.try_get("created_at_ms").with_context(|| column("created_at_ms"))?,
        id,
    })
}

#[cfg(test)]
mod tests {
    use super::super::db::testing::on_both_databases;
    use super::*;

    on_both_databases!(tokens_roundtrip);

    async fn tokens_roundtrip(db: &Db) {
        assert_eq!(db.count_tokens().await.expect("count"), 0);
        let token = |id: &str, at: i64| TokenRecord {
            id: id.to_owned(),
            name: format!("token {id}"),
            role: "admin".to_owned(),
            secret_hash: "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA".to_owned(),
            created_at_ms: at,
        };
        db.insert_token(&token("k2", 20)).await.expect("insert");
        db.insert_token(&token("k1", 10)).await.expect("insert");
        assert!(db.insert_token(&token("k1", 30)).await.is_err(), "ids are unique");
        assert_eq!(db.count_tokens().await.expect("count"), 2);
        assert_eq!(db.get_token("k1").await.expect("get"), Some(token("k1", 10)));
        assert_eq!(db.get_token("k3").await.expect("get"), None);
        let ids: Vec<String> = db.list_tokens().await.expect("list").into_iter().map(|t| t.id).collect();
        assert_eq!(ids, ["k1", "k2"]);
        let json = serde_json::to_value(token("k1", 10)).expect("serialize");
        assert!(json.get("secret_hash").is_none(), "the hash is never serialized");
        assert!(db.delete_token("k1").await.expect("delete"));
        assert!(!db.delete_token("k1").await.expect("delete"));
        assert_eq!(db.count_tokens().await.expect("count"), 1);
    }
}
