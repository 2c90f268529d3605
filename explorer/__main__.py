from explorer.cli.main import command

command()
