"""The launch dialog's Slurm rows (``SlurmFields``) and the batch-script viewer (``QtBatchScriptDialog``).

The rows read and fill a ``SlurmSettings``; the core checks them (``validate``) and writes the script
(``ringscope.gui.core.launch.slurm.batch_script``). The viewer shows the script the launch will submit, selectable,
with Save… for users who submit it themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6 import QtGui, QtWidgets

from ringscope.gui.core.launch.slurm_settings import SlurmSettings


class SlurmFields:
    """Rows for nodes, partition, time limit, account, GPUs per node and extra ``#SBATCH`` lines in ``form``."""

    def __init__(self, form: QtWidgets.QFormLayout, changed: Callable[[], None]) -> None:
        self.nodes_spin = QtWidgets.QSpinBox()
        self.nodes_spin.setRange(1, 4096)
        self.nodes_spin.setValue(2)
        self.nodes_spin.setToolTip("sbatch --nodes: the nodes of the allocation; the processes count per node")
        self.partition_edit = QtWidgets.QLineEdit()
        self.partition_edit.setPlaceholderText("empty: the cluster's default partition")
        self.time_edit = QtWidgets.QLineEdit()
        self.time_edit.setPlaceholderText("e.g. 30 (minutes) or 4:00:00; empty: the partition's limit")
        self.account_edit = QtWidgets.QLineEdit()
        self.account_edit.setPlaceholderText("empty: your default account")
        self.gpus_spin = QtWidgets.QSpinBox()
        self.gpus_spin.setRange(0, 64)
        self.gpus_spin.setSpecialValueText("none asked for")
        self.extra_edit = QtWidgets.QPlainTextEdit()
        self.extra_edit.setPlaceholderText("more #SBATCH options, one per line: --mem=64G, --exclusive, --qos=high")
        self.extra_edit.setMaximumHeight(56)
        form.addRow("Slurm nodes", self.nodes_spin)
        form.addRow("Partition", self.partition_edit)
        form.addRow("Time limit", self.time_edit)
        form.addRow("Account", self.account_edit)
        form.addRow("GPUs per node", self.gpus_spin)
        form.addRow("Extra #SBATCH", self.extra_edit)
        self.rows: tuple[QtWidgets.QWidget, ...] = (self.nodes_spin, self.partition_edit, self.time_edit,
                                                     self.account_edit, self.gpus_spin, self.extra_edit)
        for edit in (self.partition_edit, self.time_edit, self.account_edit):
            edit.textChanged.connect(changed)
        self.extra_edit.textChanged.connect(changed)
        self.nodes_spin.valueChanged.connect(changed)
        self.gpus_spin.valueChanged.connect(changed)

    def settings(self) -> SlurmSettings:
        extra = tuple(line.strip() for line in self.extra_edit.toPlainText().splitlines() if line.strip())
        return SlurmSettings(nodes=self.nodes_spin.value(), partition=self.partition_edit.text().strip(),
                             time_limit=self.time_edit.text().strip(), account=self.account_edit.text().strip(),
                             gpus_per_node=self.gpus_spin.value(), extra=extra)

    def load(self, settings: SlurmSettings) -> None:
        self.nodes_spin.setValue(settings.nodes)
        self.partition_edit.setText(settings.partition)
        self.time_edit.setText(settings.time_limit)
        self.account_edit.setText(settings.account)
        self.gpus_spin.setValue(settings.gpus_per_node)
        self.extra_edit.setPlainText("\n".join(settings.extra))


class QtBatchScriptDialog(QtWidgets.QDialog):
    """The batch script a Slurm launch submits, read-only and selectable; Save… writes it to a file."""

    def __init__(self, text: str, suggested_name: str, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Slurm batch script")
        self.text = text
        self.suggested_name = suggested_name
        layout = QtWidgets.QVBoxLayout(self)
        note = QtWidgets.QLabel("Launch writes this script next to the job's output (ringscope-slurm/ in the working "
                                "directory) and submits it with sbatch. To submit it yourself: save it, then "
                                "<code>sbatch FILE</code>.")
        note.setWordWrap(True)
        layout.addWidget(note)
        self.view = QtWidgets.QPlainTextEdit(text)
        self.view.setReadOnly(True)
        self.view.setLineWrapMode(QtWidgets.QPlainTextEdit.LineWrapMode.NoWrap)
        self.view.setFont(QtGui.QFontDatabase.systemFont(QtGui.QFontDatabase.SystemFont.FixedFont))
        layout.addWidget(self.view, 1)
        buttons = QtWidgets.QDialogButtonBox(QtWidgets.QDialogButtonBox.StandardButton.Save
                                             | QtWidgets.QDialogButtonBox.StandardButton.Close)
        buttons.accepted.connect(self._save)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.resize(980, 620)

    def save_to(self, path: Path) -> str | None:
        """Write the script to ``path`` (executable); None when written, else why not."""
        try:
            path.write_text(self.text)
            path.chmod(0o755)
        except OSError as error:
            return f"could not save {path}: {error.strerror or error}"
        return None

    def _save(self) -> None:
        name, _ = QtWidgets.QFileDialog.getSaveFileName(self, "Save the batch script", self.suggested_name,
                                                        "Batch scripts (*.sh);;All files (*)")
        if not name:
            return
        problem = self.save_to(Path(name))
        if problem:
            QtWidgets.QMessageBox.warning(self, "Save the batch script", problem)
