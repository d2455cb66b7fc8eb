//! `vramscope token create|list`: API tokens, stored hashed in the server's database.

use crate::auth::{Role, new_token};
use crate::settings::{Settings, SettingsArgs};

/// Arguments of `vramscope token`.
#[derive(Debug, clap::Args)]
pub(crate) struct TokenArgs {
    #[command(subcommand)]
    command: TokenCommand,
}

#[derive(Debug, clap::Subcommand)]
enum TokenCommand {
    /// Create a token and print it (it is shown once; only a hash is kept).
    Create {
        /// What it may do.
        #[arg(long, value_enum)]
        role: Role,
        /// Who or what it is for (shown as the author of comments, in logs).
        #[arg(long, default_value = "default")]
        name: String,
        #[command(flatten)]
        settings: SettingsArgs,
    },
    /// List tokens (ids, names, roles; never secrets).
    List {
        #[command(flatten)]
        settings: SettingsArgs,
    },
    /// Revoke a token by its id (the part after `vs_`, as `token list` shows it).
    Revoke {
        /// The token's id.
        id: String,
        #[command(flatten)]
        settings: SettingsArgs,
    },
}

/// Run the subcommand.
pub(crate) async fn run(args: &TokenArgs) -> anyhow::Result<()> {
    match &args.command {
        TokenCommand::Create { role, name, settings } => {
            let settings = Settings::load(settings)?;
            let (db, _) = settings.open_stores().await?;
            let (record, token) = new_token(name, *role)?;
            db.insert_token(&record).await?;
            eprintln!("created {} token {} ({name}); it is shown only now:", role.as_str(), record.id);
            println!("{token}");
        }
        TokenCommand::List { settings } => {
            let settings = Settings::load(settings)?;
            let (db, _) = settings.open_stores().await?;
            for t in db.list_tokens().await? {
                println!("{}\t{}\t{}", t.id, t.role, t.name);
            }
        }
        TokenCommand::Revoke { id, settings } => {
            let settings = Settings::load(settings)?;
            let (db, _) = settings.open_stores().await?;
            anyhow::ensure!(db.delete_token(id).await?, "no token with id {id}");
            eprintln!("revoked token {id}; servers refuse it from the next request");
        }
    }
    Ok(())
}
