"""keys, usage, limits' counters, files' owners

Revision ID: 0001
Revises: (none)
"""

import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('api_keys',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('digest', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('created', sa.DateTime(timezone=True), nullable=False),
    sa.Column('revoked', sa.DateTime(timezone=True), nullable=True),
    sa.Column('req_limit', sa.Integer(), nullable=True),
    sa.Column('daily_req_limit', sa.Integer(), nullable=True),
    sa.Column('monthly_char_limit', sa.BigInteger(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('digest')
    )
    op.create_table('counters',
    sa.Column('subject', sa.String(length=80), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('start', sa.BigInteger(), nullable=False),
    sa.Column('ends', sa.BigInteger(), nullable=False),
    sa.Column('count', sa.BigInteger(), nullable=False),
    sa.Column('most', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('subject', 'kind', 'start')
    )
    with op.batch_alter_table('counters', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_counters_ends'), ['ends'], unique=False)

    op.create_table('files',
    sa.Column('token', sa.String(length=32), nullable=False),
    sa.Column('name', sa.String(length=1024), nullable=False),
    sa.Column('owner', sa.String(length=80), nullable=False),
    sa.Column('size', sa.BigInteger(), nullable=False),
    sa.Column('created', sa.DateTime(timezone=True), nullable=False),
    sa.Column('expires', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('token')
    )
    with op.batch_alter_table('files', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_files_expires'), ['expires'], unique=False)
        batch_op.create_index(batch_op.f('ix_files_owner'), ['owner'], unique=False)

    op.create_table('usage',
    sa.Column('key_id', sa.Integer(), nullable=False),
    sa.Column('day', sa.Date(), nullable=False),
    sa.Column('requests', sa.BigInteger(), nullable=False),
    sa.Column('characters', sa.BigInteger(), nullable=False),
    sa.Column('last_used', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['key_id'], ['api_keys.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('key_id', 'day')
    )


def downgrade() -> None:
    op.drop_table('usage')
    with op.batch_alter_table('files', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_files_owner'))
        batch_op.drop_index(batch_op.f('ix_files_expires'))

    op.drop_table('files')
    with op.batch_alter_table('counters', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_counters_ends'))

    op.drop_table('counters')
    op.drop_table('api_keys')
