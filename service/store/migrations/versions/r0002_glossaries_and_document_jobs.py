"""glossaries and document jobs

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('document_jobs',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('key_digest', sa.String(length=64), nullable=False),
    sa.Column('owner', sa.String(length=80), nullable=False),
    sa.Column('key_id', sa.Integer(), nullable=True),
    sa.Column('name', sa.String(length=1024), nullable=False),
    sa.Column('source_lang', sa.String(length=16), nullable=False),
    sa.Column('target_lang', sa.String(length=16), nullable=False),
    sa.Column('glossary_id', sa.String(length=36), nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('seconds_remaining', sa.Integer(), nullable=True),
    sa.Column('billed_characters', sa.BigInteger(), nullable=True),
    sa.Column('error_message', sa.Text(), nullable=True),
    sa.Column('created', sa.DateTime(timezone=True), nullable=False),
    sa.Column('holder', sa.String(length=64), nullable=True),
    sa.Column('lease_expires', sa.DateTime(timezone=True), nullable=True),
    sa.Column('downloaded', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('document_jobs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_document_jobs_owner'), ['owner'], unique=False)
        batch_op.create_index(batch_op.f('ix_document_jobs_status'), ['status'], unique=False)

    op.create_table('glossaries',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('owner', sa.String(length=80), nullable=False),
    sa.Column('name', sa.Text(), nullable=False),
    sa.Column('ignore_case', sa.Boolean(), nullable=False),
    sa.Column('created', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('glossaries', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_glossaries_owner'), ['owner'], unique=False)

    op.create_table('glossary_dictionaries',
    sa.Column('glossary_id', sa.String(length=36), nullable=False),
    sa.Column('source_lang', sa.String(length=16), nullable=False),
    sa.Column('target_lang', sa.String(length=16), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('entries', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['glossary_id'], ['glossaries.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('glossary_id', 'source_lang', 'target_lang')
    )


def downgrade() -> None:
    op.drop_table('glossary_dictionaries')
    with op.batch_alter_table('glossaries', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_glossaries_owner'))

    op.drop_table('glossaries')
    with op.batch_alter_table('document_jobs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_document_jobs_status'))
        batch_op.drop_index(batch_op.f('ix_document_jobs_owner'))

    op.drop_table('document_jobs')
